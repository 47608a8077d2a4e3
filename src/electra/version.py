"""The toolkit's version, in a module of its own so that code below the package's top level
(which re-exports the commands, `electra.api`) can read it without importing upwards."""

__version__ = "0.1.0"
