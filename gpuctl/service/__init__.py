"""The service layer: every rule gpuctl applies, shared by the CLI, the REST API and the services.

Nothing here prints or parses flags; functions take typed inputs and return data or raise
`gpuctl.service.errors.ServiceError` subclasses with a message a user can act on.
"""
