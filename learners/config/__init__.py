"""An experiment's configuration: schema, validation, typed YAML loading and migrations.

The typed schema (``schema``), the rules a loaded config must satisfy (``validation``), typed
YAML loading (``typed_yaml``) and the migrations that keep older configs and run directories
loading with the same meaning (``migrations``).
"""
