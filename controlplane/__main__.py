import sys

from controlplane.cmd.cli import main

sys.exit(main())
