"""The exceptions autodnn raises. Every one derives from :class:`Error`; each also derives from
the built-in exception a caller would catch for that kind of failure."""


class Error(Exception):
    """Base class of autodnn's exceptions.

    ``argument`` names the argument at fault, when one is (else ``None``).
    """

    def __init__(self, message, argument=None):
        super().__init__(message)
        self.argument = argument


class InvalidArgumentError(Error, ValueError):
    """A bad argument: wrong dtype or shape, mismatched channels, negative padding, an
    algorithm that does not accept the problem, a closed handle. The message starts with the
    argument's name, and ``argument`` holds it."""


class NotSupportedError(Error, NotImplementedError):
    """A valid request this build has no implementation for."""


class OutOfMemoryError(Error, MemoryError):
    """An allocation failed, or would exceed the handle's workspace limit."""


class ExecutionError(Error, RuntimeError):
    """Every algorithm tried failed while running."""


class CacheError(Error, OSError):
    """The tuning cache file could not be read or written."""
