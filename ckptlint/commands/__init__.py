"""What the CLI's subcommands do once their options are parsed."""
