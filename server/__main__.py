import sys

from server.launch import main

sys.exit(main())
