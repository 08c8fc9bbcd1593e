import sys

from statekeep.cli import main

sys.exit(main())
