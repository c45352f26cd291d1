import sys

from widgets.common.examples import main

sys.exit(main())
