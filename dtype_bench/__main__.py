import shlex
import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the imports load (torch): nothing ran, nothing was written
    print(f"dtype-bench: interrupted while starting, before anything ran: run again with: "
          f"dtype-bench {shlex.join(sys.argv[1:])}", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
