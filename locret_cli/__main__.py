from locret_cli.cli import main

main()
