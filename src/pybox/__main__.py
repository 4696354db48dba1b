from pybox._main import main

raise SystemExit(main())
