# Building commands from the k8s.io/kubernetes Go module, shared by the scripts that build the
# control plane and the real node. Source it; it defines functions only.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module
# (k8s.io/api, k8s.io/client-go, ...) with ./staging/src/..., which a module cache does not
# have. A wrapper module requires it and pins each staging module to its published v0.Y.Z.

# kubernetes_wrapper DIR NAME VERSION PACKAGE...: makes DIR (emptied first) a tidy Go module
# NAME that builds PACKAGE... at Kubernetes VERSION. A package outside k8s.io/kubernetes must
# be a module Kubernetes' own go.mod pins (go.etcd.io/etcd/server/v3): it gets that version.
kubernetes_wrapper() {
  local dir=$1 name=$2 version=$3
  shift 3
  local upstream_mod
  upstream_mod=$(go mod download -json "k8s.io/kubernetes@$version" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [[ -f "$upstream_mod" ]] || {
    echo "could not download k8s.io/kubernetes@$version from the Go module proxy" >&2
    return 1
  }
  local staging_modules
  staging_modules=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$upstream_mod")
  [[ -n "$staging_modules" ]] || { echo "no staging replaces found in $upstream_mod" >&2; return 1; }

  local requires=("k8s.io/kubernetes $version") package pinned
  for package in "$@"; do
    [[ "$package" == k8s.io/kubernetes/* ]] && continue
    pinned=$(sed -n "s#^[[:space:]]*${package//./\\.} \(v[^[:space:]]*\).*#\1#p" "$upstream_mod")
    [[ -n "$pinned" ]] || { echo "k8s.io/kubernetes@$version does not pin $package" >&2; return 1; }
    requires+=("$package $pinned")
  done

  local go_line
  go_line=$(grep -E '^go ' "$upstream_mod") || { echo "no go line in $upstream_mod" >&2; return 1; }

  rm -rf "$dir" && mkdir -p "$dir" || return 1
  {
    echo "module $name"
    echo
    echo "$go_line"
    grep -E '^godebug ' "$upstream_mod" || true
    echo
    echo "require ("
    printf '\t%s\n' "${requires[@]}"
    echo ")"
    echo
    echo "replace ("
    local module
    for module in $staging_modules; do printf '\t%s => %s v0.%s\n' "$module" "$module" "${version#v1.}"; done
    echo ")"
  } >"$dir/go.mod" || return 1
  {
    echo "//go:build tools"
    echo
    echo "// Package tools only names the commands this module builds, so \`go mod tidy\` keeps their deps."
    echo "package tools"
    echo
    echo "import ("
    printf '\t_ "%s"\n' "$@"
    echo ")"
  } >"$dir/tools.go" || return 1
  (cd "$dir" && go mod tidy)
}

# kubernetes_ldflags VERSION: the linker flags that make a command report VERSION, as a
# release build's would (`kubectl version`, the apiserver's /version).
kubernetes_ldflags() {
  local version=$1 minor
  minor=${version#v1.}
  minor=${minor%%.*}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean"
}
