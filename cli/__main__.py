from lakelog.cli.main import main

raise SystemExit(main())
