"""What servers leave on disk and say over their socket: the state record, its protocol, paths, launch ids."""
