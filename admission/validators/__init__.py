"""The admission rules, one file per group, named after it (Kueue's pkg/webhooks style): each file holds the
rules' Python checks (each takes what it reads and returns the Violations it finds, an empty list when none),
the CEL the policies compile from them where a policy carries them, and one fix per rule. Which rule lives
in which file, what it checks and where: admission.registry (`python -m admission.registry` prints the table,
docs/admission.md holds it); admission.rules and admission.isolation run the checks in its order.
"""
