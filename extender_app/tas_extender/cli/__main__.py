import sys

from tas_extender.cli import main

sys.exit(main())
