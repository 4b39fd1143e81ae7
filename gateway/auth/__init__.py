"""Who may call the HTTP binding and read the processor's metrics: principals, their roles
and queues, and their keys.

No HTTP here: the credentials file's format (credentials.py), the roles and queue
patterns (roles.py), keys and their hashes (keys.py), the keyring a process answers
from, read again when the file changes (keyring.py), and whose a request's key is
(bearer.py). The binding's check is gateway/http/access.py, the status port's
gateway/processor/status_access.py.
"""
