from sparkfleet_cli.cli import run

run()
