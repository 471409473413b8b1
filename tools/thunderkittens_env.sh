# Sourced by tools/test.sh and tools/prepare_device.sh after tools/bootstrap.sh: the CUDA
# library is built with nfn's ThunderKittens attention (cuda/tk) where bootstrap fetched a
# ThunderKittens tree, unless NFN_THUNDERKITTENS_DIR already names one.
tk_tree=${XDG_CACHE_HOME:-$HOME/.cache}/nfn/thunderkittens
if [ -z "${NFN_THUNDERKITTENS_DIR:-}" ] && [ -f "$tk_tree/include/kittens.cuh" ]; then
  export NFN_THUNDERKITTENS_DIR=$tk_tree
fi
