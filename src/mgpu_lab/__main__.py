"""``python -m mgpu_lab ...`` runs the project's command (the console script), whatever its installed name."""

from mgpu_lab.cli import main

if __name__ == "__main__":
    main()
