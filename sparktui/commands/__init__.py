"""One module per `sparktui` subcommand: each defines add_arguments(parser) and run(args) -> int."""
