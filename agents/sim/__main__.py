import sys

from agents.sim.run import main

sys.exit(main())
