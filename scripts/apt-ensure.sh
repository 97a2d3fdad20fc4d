# Sourced by scripts/setup.sh and scripts/fuzz.sh: apt_ensure PREFIX PACKAGE… installs the Debian
# packages that are missing (idempotent: nothing happens when all are there) and says what it does,
# each line starting with PREFIX ("setup", "fuzz"). Root runs apt-get itself, others through sudo.
apt_ensure() {
  local prefix=$1
  shift
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "$prefix: all $# Debian packages already installed"
    return 0
  fi
  echo "$prefix: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}
