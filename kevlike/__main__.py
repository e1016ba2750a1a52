from kevlike.cli import main

raise SystemExit(main())
