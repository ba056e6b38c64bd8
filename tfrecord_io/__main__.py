"""``python -m tfrecord_io`` runs the small write-then-read demo."""

from .demo import main

raise SystemExit(main())
