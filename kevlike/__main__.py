from kevlike.cli import console

console()
