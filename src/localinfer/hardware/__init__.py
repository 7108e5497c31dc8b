"""What this machine has (``detect``) and what to run on it (``plan``)."""
