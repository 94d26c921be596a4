from .benchmark import console

console()  # errors leave through SystemExit with a message; a finished run exits 0
