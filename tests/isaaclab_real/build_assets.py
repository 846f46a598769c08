"""Build the two USD files Isaac Lab 3.0's Cartpole loads, in a local asset root, from the test stages its wheel ships.

Run with the Isaac Lab venv's Python (``pxr`` is usd-exchange, an Isaac Lab dependency)::

    .isaaclab-venv/bin/python tests/isaaclab_real/build_assets.py ROOT

and point Isaac Lab at it with ``ISAACSIM_ASSET_ROOT=ROOT`` (``isaaclab.utils.assets`` reads the variable once, at
import, and resolves ``{ROOT}/Isaac/IsaacLab/...``). Nothing third-party is committed: the files are built from the
installed wheel each time (about a second). Writes:

- ``Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd``: the robot prim of a shipped Cartpole stage with the
  prototypes its instanced visuals and collisions reference, copied into a new layer (``Sdf.CopySpec``);
- ``Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda``: an Xform with a
  child ``Plane`` carrying ``PhysicsCollisionAPI`` (what the ground-plane spawner binds its material to).

Prints the two paths, one a line.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROBOT = "Isaac/IsaacLab/Robots/Classic/Cartpole/cartpole.usd"
GROUND = "Isaac/IsaacLab/Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda"
#: the shipped stage the robot comes from (physics-agnostic USD physics schemas; any of the cartpole stages works)
STAGE = "isaaclab/source/isaaclab_tasks/test/golden_stages/cartpole/physx-newton_renderer-rgb.usda"
SOURCE_ROBOT = "/World/envs/env_0/Robot"


def shipped_stage() -> Path:
    import isaaclab

    site = Path(isaaclab.__file__).resolve().parent.parent
    path = site / STAGE
    if not path.is_file():
        raise SystemExit(f"build_assets: {path} is missing (is this Isaac Lab 3.0's venv?)")
    return path


def build_robot(out: Path) -> None:
    from pxr import Sdf

    source = Sdf.Layer.FindOrOpen(str(shipped_stage()))
    layer = Sdf.Layer.CreateNew(str(out))
    for key in ("metersPerUnit", "kilogramsPerUnit", "upAxis"):
        if source.pseudoRoot.GetInfo(key) is not None:
            layer.pseudoRoot.SetInfo(key, source.pseudoRoot.GetInfo(key))
    for prim in source.rootPrims:  # the instance prototypes the robot's visuals and collisions reference
        if prim.name.startswith("Flattened_Prototype_"):
            Sdf.CopySpec(source, prim.path, layer, prim.path)
    Sdf.CopySpec(source, Sdf.Path(SOURCE_ROBOT), layer, Sdf.Path("/cartpole"))
    robot = layer.GetPrimAtPath("/cartpole")
    translate = robot.attributes.get("xformOp:translate")
    if translate is not None:  # the stage placed it in its env; the asset sits at its own origin
        translate.default = (0.0, 0.0, 0.0)
    layer.defaultPrim = "cartpole"
    text = layer.ExportToString()
    if SOURCE_ROBOT in text:
        raise SystemExit(f"build_assets: {out} still points into {SOURCE_ROBOT}")
    layer.Save()


def build_ground(out: Path) -> None:
    from pxr import Usd, UsdGeom, UsdPhysics

    stage = Usd.Stage.CreateNew(str(out))
    UsdGeom.SetStageUpAxis(stage, UsdGeom.Tokens.z)
    UsdGeom.SetStageMetersPerUnit(stage, 1.0)
    root = UsdGeom.Xform.Define(stage, "/GroundPlane")
    plane = UsdGeom.Plane.Define(stage, "/GroundPlane/CollisionPlane")
    plane.CreateAxisAttr(UsdGeom.Tokens.z)
    plane.CreateWidthAttr(100.0)
    plane.CreateLengthAttr(100.0)
    UsdPhysics.CollisionAPI.Apply(plane.GetPrim())
    stage.SetDefaultPrim(root.GetPrim())
    stage.GetRootLayer().Save()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: build_assets.py ROOT", file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    robot, ground = root / ROBOT, root / GROUND
    for path in (robot, ground):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # Sdf refuses to create a layer over an existing file
    build_robot(robot)
    build_ground(ground)
    print(robot)
    print(ground)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
