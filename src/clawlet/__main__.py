"""``python -m clawlet`` runs the CLI."""

from clawlet.cli import main

raise SystemExit(main())
