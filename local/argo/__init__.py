"""Stand-ins for Argo on one machine: ``runner`` (Argo Workflows) and ``hooks`` (Argo Events)."""
