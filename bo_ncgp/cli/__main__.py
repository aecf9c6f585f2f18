"""``python -m bo_ncgp.cli ...`` runs the ``bo-ncgp`` command."""

from bo_ncgp.cli import main

raise SystemExit(main())
