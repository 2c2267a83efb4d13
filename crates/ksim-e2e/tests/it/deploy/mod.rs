//! What `deploy/` ships: the kustomizations, proven against the real apiserver with the
//! kubectl built beside it, and the images `deploy/images/build.sh` makes.

mod images;
mod manifests;
