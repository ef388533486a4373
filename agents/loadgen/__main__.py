import sys

from agents.loadgen.main import main

sys.exit(main())
