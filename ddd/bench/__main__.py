from .benchmark import main

main()  # errors leave through SystemExit with a message; a finished run exits 0
