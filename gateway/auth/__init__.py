"""Who may call the HTTP binding: principals, their roles and queues, and their keys.

No HTTP here: the credentials file's format (credentials.py), the roles and queue
patterns (roles.py), keys and their hashes (keys.py), and the keyring a serve
process answers from, read again when the file changes (keyring.py). The HTTP
check is gateway/http/access.py.
"""
