import sys

from agents.router.main import main

sys.exit(main())
