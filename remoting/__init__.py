"""Wire contracts shared by every process: gRPC services (proto/, generated pb/), response codes, HA frames."""
