from ampkit.cli.main import main

raise SystemExit(main())
