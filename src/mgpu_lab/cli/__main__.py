"""``python -m mgpu_lab.cli ...`` runs the ``isaaclab`` command."""

from mgpu_lab.cli import main

if __name__ == "__main__":
    main()
