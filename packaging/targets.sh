# The release targets, shared by packaging/build, packaging/build-llama-cpp-portable and the release workflow
# (.github/workflows/release.yml calls packaging/build --target NAME): sourced, not run.
#
#   linux-x64 linux-arm64 macos-arm64 windows-x64-cpu windows-x64-vulkan windows-x64-cuda

TARGETS="linux-x64 linux-arm64 macos-arm64 windows-x64-cpu windows-x64-vulkan windows-x64-cuda"

# This machine's target: what packaging/build makes when no --target is given.
host_target() {
  local os arch
  case "$(uname -s)" in
    Linux) os=linux ;;
    Darwin) os=macos ;;
    MINGW* | MSYS* | CYGWIN*) os=windows ;;
    *) os=$(uname -s) ;;
  esac
  case "$(uname -m)" in
    x86_64 | amd64 | AMD64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) arch=$(uname -m) ;;
  esac
  if [ "$os" = windows ]; then echo "windows-$arch-cpu"; else echo "$os-$arch"; fi
}

# Exits with a line naming the targets when $1 is not one of them.
check_target() {
  case " $TARGETS " in
    *" $1 "*) ;;
    *) printf '%s: no target %s (targets: %s)\n' "$(basename "$0")" "$1" "$TARGETS" >&2; exit 2 ;;
  esac
}

# sha256sum where there is one (Linux, Git Bash), shasum on macOS: the same output (an array, for xargs too).
SHA256=(sha256sum)
command -v sha256sum >/dev/null 2>&1 || SHA256=(shasum -a 256)
sha256() { "${SHA256[@]}" "$@"; }
