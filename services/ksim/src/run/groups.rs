//! `--node-group NAME=SKELETON.yaml:COUNT` and `--autoscaler-group NAME=SKELETON.yaml:MIN:MAX:INITIAL`.
//! The numbers are taken from the right, so a skeleton path may itself contain `:`.

use std::path::PathBuf;

use ksim_nodes::limits::{MAX_NODES_PER_GROUP, MAX_POOL_GROUP_NAME_LEN};

/// A fixed-size group the pool creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGroupArg {
    pub name: String,
    pub skeleton: PathBuf,
    pub count: i32,
}

/// A Deployment-backed group cluster-autoscaler may resize.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoscalerGroupArg {
    pub name: String,
    pub skeleton: PathBuf,
    pub min: i32,
    pub max: i32,
    pub initial: i32,
}

pub fn parse_node_group(value: &str) -> Result<NodeGroupArg, String> {
    const FORM: &str = "expected NAME=SKELETON.yaml:COUNT";
    let (name, rest) = name_and_rest(value, FORM)?;
    // The pool's limits, checked here so a run past them is never started.
    if name.len() > MAX_POOL_GROUP_NAME_LEN {
        return Err(format!(
            "group name {name:?} is {} characters long; a fixed-size group's name has at most \
             {MAX_POOL_GROUP_NAME_LEN}",
            name.len()
        ));
    }
    let (skeleton, count) = rest.rsplit_once(':').ok_or(FORM)?;
    Ok(NodeGroupArg {
        name,
        skeleton: skeleton_path(skeleton, FORM)?,
        count: nodes("COUNT", count)?,
    })
}

pub fn parse_autoscaler_group(value: &str) -> Result<AutoscalerGroupArg, String> {
    const FORM: &str = "expected NAME=SKELETON.yaml:MIN:MAX:INITIAL";
    let (name, rest) = name_and_rest(value, FORM)?;
    let mut fields = rest.rsplitn(4, ':');
    let (Some(initial), Some(max), Some(min), Some(skeleton)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(FORM.to_owned());
    };
    let (min, max, initial) = (
        nodes("MIN", min)?,
        nodes("MAX", max)?,
        nodes("INITIAL", initial)?,
    );
    if min > max || initial < min || initial > max {
        return Err(format!(
            "need MIN <= INITIAL <= MAX, got {min}, {initial}, {max}"
        ));
    }
    Ok(AutoscalerGroupArg {
        name,
        skeleton: skeleton_path(skeleton, FORM)?,
        min,
        max,
        initial,
    })
}

/// The suffix of the group the pool keeps its seat host in (`<pool>-seat-host`, ksim-vnode's
/// `PoolConfig::seat_host_group`): a run's group of that name would be refused by the pool
/// only once the run had started.
const SEAT_HOST_SUFFIX: &str = "-seat-host";

fn name_and_rest<'a>(value: &'a str, form: &str) -> Result<(String, &'a str), String> {
    let (name, rest) = value.split_once('=').ok_or(form)?;
    if !ksim_nodes::names::is_dns_label(name) {
        return Err(format!(
            "group name {name:?} is not a DNS label (a-z, 0-9, '-')"
        ));
    }
    if name.ends_with(SEAT_HOST_SUFFIX) {
        return Err(format!(
            "group name {name:?} is reserved: the pool keeps its seat host in the group \
             <pool>{SEAT_HOST_SUFFIX}; choose another name"
        ));
    }
    Ok((name.to_owned(), rest))
}

fn skeleton_path(path: &str, form: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err(format!("{form}: the skeleton path is empty"));
    }
    Ok(PathBuf::from(path))
}

/// A node count: 0 up to the pool's limit per group, which also bounds MIN and INITIAL (they
/// are at most MAX). A number past it is said to be out of range, however many digits it has.
fn nodes(what: &str, text: &str) -> Result<i32, String> {
    let digits = text.strip_prefix('+').unwrap_or(text);
    let range = format!("a group holds 0 to {MAX_NODES_PER_GROUP} nodes");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let negative = text
            .strip_prefix('-')
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()));
        return Err(if negative {
            format!("{what} {text} is negative: {range}")
        } else {
            format!("{what} {text:?} is not a whole number: {range}")
        });
    }
    match digits.parse::<u32>() {
        Ok(count) if count <= MAX_NODES_PER_GROUP => {
            i32::try_from(count).map_err(|_| format!("{what} {digits} is out of range: {range}"))
        }
        _ => Err(format!(
            "{what} {digits} is more than {MAX_NODES_PER_GROUP}, the most nodes a group may hold"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_group_takes_the_count_from_the_right() {
        assert_eq!(
            parse_node_group("m5=dir:with:colons/m5.yaml:3").unwrap(),
            NodeGroupArg {
                name: "m5".into(),
                skeleton: "dir:with:colons/m5.yaml".into(),
                count: 3
            }
        );
    }

    #[test]
    fn bad_node_groups_say_what_is_wrong() {
        for (value, expected) in [
            ("m5", "expected NAME=SKELETON.yaml:COUNT"),
            ("m5=x.yaml", "expected NAME=SKELETON.yaml:COUNT"),
            ("m5=x.yaml:three", "COUNT \"three\""),
            (
                "m5=x.yaml:-1",
                "COUNT -1 is negative: a group holds 0 to 10000 nodes",
            ),
            ("m5=x.yaml:", "COUNT \"\" is not a whole number"),
            ("M5=x.yaml:1", "not a DNS label"),
            ("=x.yaml:1", "not a DNS label"),
            ("m5=:1", "skeleton path is empty"),
            ("m5=x.yaml:10001", "COUNT 10001 is more than 10000"),
            ("m5=x.yaml:1000000", "COUNT 1000000 is more than 10000"),
            (
                "m5=x.yaml:99999999999",
                "COUNT 99999999999 is more than 10000",
            ),
            (
                "ksim-seat-host=x.yaml:1",
                "group name \"ksim-seat-host\" is reserved",
            ),
            (
                format!("{}=x.yaml:1", "a".repeat(41)).as_str(),
                "41 characters long; a fixed-size group's name has at most 40",
            ),
        ] {
            let error = parse_node_group(value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
        }
    }

    #[test]
    fn autoscaler_group_parses_and_checks_its_bounds() {
        assert_eq!(
            parse_autoscaler_group("big=s.yaml:0:10:2").unwrap(),
            AutoscalerGroupArg {
                name: "big".into(),
                skeleton: "s.yaml".into(),
                min: 0,
                max: 10,
                initial: 2
            }
        );
        assert!(
            parse_autoscaler_group("big=s.yaml:0:10")
                .unwrap_err()
                .contains("MIN:MAX:INITIAL")
        );
        assert!(
            parse_autoscaler_group("big=s.yaml:3:10:2")
                .unwrap_err()
                .contains("MIN <= INITIAL <= MAX")
        );
        assert!(
            parse_autoscaler_group("big=s.yaml:0:10001:2")
                .unwrap_err()
                .contains("MAX 10001 is more than 10000")
        );
        assert!(parse_node_group("m5=x.yaml:10000").is_ok());
        // Past what an i32 or u32 holds: out of range, not "not a whole number".
        for (value, expected) in [
            (
                "big=s.yaml:0:4294967295:2",
                "MAX 4294967295 is more than 10000",
            ),
            (
                "big=s.yaml:0:10:4294967296",
                "INITIAL 4294967296 is more than 10000",
            ),
            (
                "big=s.yaml:2147483648:10:2",
                "MIN 2147483648 is more than 10000",
            ),
            (
                "pool-seat-host=s.yaml:0:10:2",
                "group name \"pool-seat-host\" is reserved",
            ),
        ] {
            let error = parse_autoscaler_group(value).unwrap_err();
            assert!(error.contains(expected), "{value}: {error}");
            assert!(!error.contains("not a whole number"), "{value}: {error}");
        }
        assert!(
            parse_autoscaler_group("big=s.yaml:0:1:x")
                .unwrap_err()
                .contains("INITIAL")
        );
    }
}
