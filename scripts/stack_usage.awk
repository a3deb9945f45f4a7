# Worst-case stack depth of each sagessd_fw_* entry point, from the disassembly of a linked ARM
# ELF (`arm-none-eabi-objdump -d --no-show-raw-insn ELF | awk -f scripts/stack_usage.awk`).
#
# Per function: the bytes its prologue reserves (push/vpush/stmdb of registers, sub sp, sp, #N).
# Calls: bl/blx to a symbol, and tail branches (b) to the start of another function. The depth
# of a function is its frame plus the deepest of its callees'. Indirect calls (blx rN: the
# board's flash submit callback) are counted as 0 and reported; recursion is reported and cut.
# Used by scripts/footprint.sh. POSIX awk (mawk and gawk both work).

function regs(list,    n, parts, i, a, b, lo, hi) {
    # "{r4, r5, fp, lr}" -> 4 registers; "{d8-d15}" -> 8 registers
    gsub(/[{}]/, "", list)
    n = split(list, parts, ",")
    total = 0
    for (i = 1; i <= n; i++) {
        if (parts[i] ~ /-/) {
            split(parts[i], a, "-")
            lo = a[1]; hi = a[2]
            gsub(/[^0-9]/, "", lo); gsub(/[^0-9]/, "", hi)
            total += hi - lo + 1
        } else if (parts[i] ~ /[a-z0-9]/) {
            total += 1
        }
    }
    return total
}

function depth(f,    best, d, i, n, callee) {
    if (f in memo) return memo[f]
    if (f in visiting) { recursive[f] = 1; return 0 }
    visiting[f] = 1
    best = 0; deepest[f] = ""
    n = ncalls[f]
    for (i = 1; i <= n; i++) {
        callee = call[f, i]
        d = depth(callee)
        if (d > best) { best = d; deepest[f] = callee }
    }
    delete visiting[f]
    memo[f] = frame[f] + best
    return memo[f]
}

# "60000108 <name>:" starts a function
/^[0-9a-f]+ <[^>]+>:$/ {
    cur = $2; sub(/^</, "", cur); sub(/>:$/, "", cur)
    frame[cur] += 0; ncalls[cur] += 0
    next
}

cur == "" { next }

{
    line = $0
    sub(/^[ \t]*[0-9a-f]+:[ \t]*/, "", line)
    split(line, w, /[ \t]+/)
    op = w[1]
    rest = line; sub(/^[^ \t]+[ \t]+/, "", rest)
}

op ~ /^(push|vpush)(\.w)?$/ {
    bytes = (op ~ /^vpush/ ? 8 : 4)
    if (match(rest, /\{[^}]*\}/)) frame[cur] += bytes * regs(substr(rest, RSTART, RLENGTH))
    next
}

op ~ /^stmdb(\.w)?$/ && rest ~ /^sp!/ {
    if (match(rest, /\{[^}]*\}/)) frame[cur] += 4 * regs(substr(rest, RSTART, RLENGTH))
    next
}

op == "str" && rest ~ /\[sp, #-4\]!/ { frame[cur] += 4; next }

# sub sp, sp, #N (ARM, Thumb-2) and sub sp, #N (Thumb); not sub sp, fp, #N (an epilogue)
op ~ /^subs?(\.w)?$/ && (rest ~ /^sp, sp, #[0-9]+/ || rest ~ /^sp, #[0-9]+/) {
    n = rest; sub(/^sp, (sp, )?#/, "", n); sub(/[^0-9].*$/, "", n)
    frame[cur] += n + 0
    next
}

op ~ /^sub/ && rest ~ /^sp, sp, r/ { dynamic[cur] = 1; next }

op ~ /^blx?(\.w)?$/ && rest ~ /<[^>+]+>$/ {
    t = rest; sub(/^.*</, "", t); sub(/>$/, "", t)
    call[cur, ++ncalls[cur]] = t
    next
}

op ~ /^blx$/ && rest ~ /^r[0-9]+$/ { indirect[cur] = 1; next }

# a tail call: an unconditional branch to the very start of another function
op ~ /^b(\.w)?$/ && rest ~ /<[^>+]+>$/ {
    t = rest; sub(/^.*</, "", t); sub(/>$/, "", t)
    if (t != cur) call[cur, ++ncalls[cur]] = t
    next
}

END {
    printf "%-30s %12s  %s\n", "entry point", "stack bytes", "deepest path (frame bytes)"
    for (f in frame) if (f ~ /^sagessd_fw_/) entries[++ne] = f
    # sort entries by name (insertion sort, POSIX awk has no asort)
    for (i = 2; i <= ne; i++) { v = entries[i]; j = i - 1
        while (j > 0 && entries[j] > v) { entries[j + 1] = entries[j]; j-- }
        entries[j + 1] = v }
    for (i = 1; i <= ne; i++) {
        f = entries[i]
        d = depth(f)
        path = ""; g = f; notes = ""
        while (g != "") {
            name = g
            path = path (path == "" ? "" : " > ") name " (" frame[g] ")"
            if (g in indirect) notes = notes " +callback"
            if (g in recursive) notes = notes " recursive"
            if (g in dynamic) notes = notes " dynamic-alloca"
            g = deepest[g]
        }
        printf "%-30s %12d  %s%s\n", f, d, path, notes
    }
}
