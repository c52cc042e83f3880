import sys

from chainermn_rt.cli import main

sys.exit(main())
