"""The ladder. Importing this package registers every rung, in ladder order."""
from . import reference, cpu  # noqa: F401
