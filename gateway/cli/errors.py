class CommandError(Exception):
    """A failure reported to the user as one line, with a non-zero exit."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code
