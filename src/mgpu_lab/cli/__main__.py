"""``python -m mgpu_lab.cli ...`` runs the ``mgpu-lab`` command."""

from mgpu_lab.cli import main

if __name__ == "__main__":
    main()
