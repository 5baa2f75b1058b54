# lit configuration for Precast's IR-text tests. lit.site.cfg.py (generated) sets the paths.
import os

import lit.formats

config.name = "precast"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".ir"]
config.excludes = ["Inputs"]
config.test_source_root = os.path.dirname(__file__)

config.substitutions.append(("%precast-opt", config.precast_opt))
config.substitutions.append(("%FileCheck", config.filecheck))
config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(config.precast_opt), os.path.dirname(config.precast), config.llvm_bin_dir,
     config.environment.get("PATH", "")])
