from pybox._frontends.cli import main

raise SystemExit(main())
