import sys

from edge_deploy.cli import main

sys.exit(main())
