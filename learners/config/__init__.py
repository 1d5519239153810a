"""An experiment's configuration: schema, validation, typed YAML loading and migrations.

The typed schema and the one loader (``schema``), the env and agent sections read as their
components' options (``sections``), the rules a loaded config must satisfy (``validation``),
typed YAML loading (``typed_yaml``) and the migrations that keep older configs and run
directories loading with the same meaning (``migrations``).
"""
