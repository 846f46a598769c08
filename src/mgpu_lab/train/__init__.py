"""The rank side: one training process, its library adapters, tasks and distributed set-up."""
