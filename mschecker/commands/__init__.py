"""One module per subcommand; each exposes main(argv) -> exit code."""
