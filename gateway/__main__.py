import sys

try:
    from gateway.cli import main
except KeyboardInterrupt:  # Ctrl-C while still starting: no traceback for that
    sys.exit(130)

raise SystemExit(main())
