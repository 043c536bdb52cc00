"""The gpuctl command line: one module per verb (as kubectl's pkg/cmd/<verb>), flags and printing
kept apart from the work, which lives in gpuctl.service."""
