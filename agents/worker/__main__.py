import sys

from agents.worker.main import main

sys.exit(main())
