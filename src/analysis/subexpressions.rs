//! Common subexpressions: the instructions computing the same expression as
//! the root.
//!
//! Only pure instructions form expressions: binary operators, casts,
//! getelementptr, icmp, fcmp, select, extractvalue, insertvalue,
//! extractelement, insertelement and shufflevector (SPEC.md §2). An
//! expression's key is its function (expressions are compared within one
//! function only), its opcode, its *shape* and its operand node ids in
//! position order (sorted for the commutative add, fadd, mul, fmul, and, or,
//! xor). The shape holds what the operands do not determine, read off the
//! instruction's text: the compare predicate, a cast's result type, a
//! getelementptr's source element type, and the immediate indices of
//! extractvalue/insertvalue and the mask of shufflevector. (SPEC.md names
//! "result type"; for every other pure opcode the operands' types fix it.)
//!
//! Steps: 2 (a lookup, not an iteration).

use rustc_hash::FxHashMap;

use super::FlowGraph;

const STEPS: u32 = 2;

const BINARY: &[&str] = &[
    "add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and", "or", "xor", "fadd", "fsub", "fmul", "fdiv", "frem",
    "fneg",
];
const COMMUTATIVE: &[&str] = &["add", "fadd", "mul", "fmul", "and", "or", "xor"];
const CASTS: &[&str] = &[
    "trunc",
    "zext",
    "sext",
    "fptrunc",
    "fpext",
    "fptoui",
    "fptosi",
    "uitofp",
    "sitofp",
    "ptrtoint",
    "inttoptr",
    "bitcast",
    "addrspacecast",
];
const OTHERS: &[&str] =
    &["getelementptr", "icmp", "fcmp", "select", "extractvalue", "insertvalue", "extractelement", "insertelement", "shufflevector"];

pub(super) fn is_pure(opcode: &str) -> bool {
    BINARY.contains(&opcode) || CASTS.contains(&opcode) || OTHERS.contains(&opcode)
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    /// Expressions are compared within one function only.
    function: Option<u32>,
    opcode: String,
    shape: String,
    operands: Vec<u32>,
}

/// The expression key of an instruction, or `None` if it is not pure.
pub(super) fn key(flow: &FlowGraph<'_>, inst: u32) -> Option<Key> {
    let node = flow.node(inst);
    let opcode = node.text.as_str();
    if !is_pure(opcode) {
        return None;
    }
    let mut operands: Vec<(u32, u32)> = flow.data_pred.of(inst).iter().map(|&(src, pos)| (pos, src)).collect();
    operands.sort_unstable();
    let mut operands: Vec<u32> = operands.into_iter().map(|(_, src)| src).collect();
    if COMMUTATIVE.contains(&opcode) {
        operands.sort_unstable();
    }
    let text = node.full_text.as_deref().unwrap_or("");
    Some(Key { function: node.function, opcode: opcode.to_string(), shape: shape(opcode, text), operands })
}

/// `inst`'s [`key`] `k` as a model reading the graph sees it: the shape replaced by the
/// texts of the instruction's result nodes (their types). A cast's result
/// type shows there; an `icmp`'s predicate, a `getelementptr`'s source
/// element type (an opaque `ptr` either way), a `shufflevector`'s mask and
/// an `extractvalue`'s indices (beyond the type they give) are in no node
/// text or edge, so instructions differing only in them look alike.
pub(super) fn visible_key(flow: &FlowGraph<'_>, inst: u32, k: &Key) -> Key {
    let mut results: Vec<&str> = flow.data_succ.nodes(inst).map(|n| flow.node(n).text.as_str()).collect();
    results.sort_unstable();
    Key { shape: results.join(","), ..k.clone() }
}

/// Over `roots`, the labels against what the graph shows ([`visible_key`]):
/// `(positives, lookalikes)`, the instructions with each root's key, and
/// those with its visible key but another key. A model that reads only
/// node texts and edges labels both alike, so `positives / (positives +
/// lookalikes)` bounds its precision.
pub(super) fn lookalikes(flow: &FlowGraph<'_>, roots: &[u32]) -> (u64, u64) {
    let mut by_visible: FxHashMap<Key, Vec<u32>> = FxHashMap::default();
    let mut keys: FxHashMap<u32, (Key, Key)> = FxHashMap::default();
    for inst in flow.instructions() {
        if let Some(k) = key(flow, inst) {
            let v = visible_key(flow, inst, &k);
            by_visible.entry(v.clone()).or_default().push(inst);
            keys.insert(inst, (k, v));
        }
    }
    let (mut positives, mut lookalikes) = (0, 0);
    for &root in roots {
        let Some((k, v)) = keys.get(&root) else { continue };
        for m in &by_visible[v] {
            if keys[m].0 == *k {
                positives += 1;
            } else {
                lookalikes += 1;
            }
        }
    }
    (positives, lookalikes)
}

/// What distinguishes two instructions of the same opcode and operands.
pub(super) fn shape(opcode: &str, full_text: &str) -> String {
    // Drop the "%name = " of the result.
    let rhs = full_text.split_once(" = ").map_or(full_text, |(_, r)| r);
    let rhs = rhs.split(", !").next().unwrap_or(rhs); // metadata attachments
    match opcode {
        "icmp" | "fcmp" => {
            // icmp <pred> <ty> a, b ; fcmp [fast-math flags] <pred> <ty> a, b
            const PREDICATES: &[&str] = &[
                "eq", "ne", "ugt", "uge", "ult", "ule", "sgt", "sge", "slt", "sle", "false", "oeq", "ogt", "oge", "olt", "ole", "one",
                "ord", "ueq", "une", "uno", "true",
            ];
            rhs.split_whitespace().skip(1).find(|w| PREDICATES.contains(w)).unwrap_or("").to_string()
        }
        _ if CASTS.contains(&opcode) => rhs.rsplit_once(" to ").map_or("", |(_, ty)| ty).trim().to_string(),
        "getelementptr" => {
            let rest = rhs.trim_start_matches("getelementptr").trim_start();
            let rest = rest.strip_prefix("inbounds ").unwrap_or(rest);
            top_level_parts(rest).first().map_or(String::new(), |s| s.trim().to_string())
        }
        "extractvalue" => top_level_parts(rhs).get(1..).map_or(String::new(), |p| p.join(",")),
        "insertvalue" => top_level_parts(rhs).get(2..).map_or(String::new(), |p| p.join(",")),
        "shufflevector" => top_level_parts(rhs).get(2).map_or(String::new(), |s| s.trim().to_string()),
        _ => String::new(),
    }
}

/// Splits at commas outside brackets, braces, parentheses and quotes.
fn top_level_parts(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start, mut quoted) = (0i32, 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '[' | '{' | '<' if !quoted => depth += 1,
            ')' | ']' | '}' | '>' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The instructions of a graph grouped by expression key.
pub(super) struct Classes {
    class_of: FxHashMap<u32, u32>,
    members: Vec<Vec<u32>>,
}

impl Classes {
    pub(super) fn new(flow: &FlowGraph<'_>) -> Classes {
        let mut by_key: FxHashMap<Key, u32> = FxHashMap::default();
        let mut class_of = FxHashMap::default();
        let mut members: Vec<Vec<u32>> = Vec::new();
        for inst in flow.instructions() {
            if let Some(k) = key(flow, inst) {
                let c = *by_key.entry(k).or_insert_with(|| {
                    members.push(Vec::new());
                    members.len() as u32 - 1
                });
                members[c as usize].push(inst);
                class_of.insert(inst, c);
            }
        }
        Classes { class_of, members }
    }

    /// Instructions whose key at least one other instruction shares.
    pub(super) fn shared_roots(&self) -> Vec<u32> {
        let mut roots: Vec<u32> = self.members.iter().filter(|m| m.len() > 1).flatten().copied().collect();
        roots.sort_unstable();
        roots
    }

    /// Every instruction with the root's key (the root alone if nothing
    /// shares it; nothing if the root is not a pure instruction).
    pub(super) fn analyze(&self, root: u32) -> (u32, Vec<u32>) {
        match self.class_of.get(&root) {
            Some(&c) => (STEPS, self.members[c as usize].clone()),
            None => (STEPS, Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shape;

    #[test]
    fn shapes() {
        assert_eq!(shape("icmp", "%c = icmp slt i32 %a, %b"), "slt");
        assert_eq!(shape("fcmp", "%c = fcmp fast olt float %a, %b"), "olt");
        assert_eq!(shape("zext", "%w = zext i8 %a to i64"), "i64");
        assert_eq!(shape("getelementptr", "%p = getelementptr inbounds %struct.S, ptr %s, i64 0, i32 1"), "%struct.S");
        assert_eq!(shape("getelementptr", "%p = getelementptr [4 x i8], ptr @g, i64 0, i64 %i"), "[4 x i8]");
        assert_eq!(shape("extractvalue", "%x = extractvalue { i32, { i8, i8 } } %agg, 1, 0"), " 1, 0");
        assert_eq!(shape("insertvalue", "%y = insertvalue { i32, i32 } %agg, i32 %v, 1"), " 1");
        assert_eq!(
            shape("shufflevector", "%s = shufflevector <4 x i32> %a, <4 x i32> %b, <4 x i32> <i32 0, i32 5, i32 2, i32 7>"),
            "<4 x i32> <i32 0, i32 5, i32 2, i32 7>"
        );
        assert_eq!(shape("add", "%s = add nsw i32 %a, %b, !dbg !12"), "");
    }
}
