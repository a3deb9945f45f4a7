//! `libsagessd_qemu_a9_profile.so`: a QEMU TCG plugin that measures the sagessd firmware on an
//! emulated Cortex-A9 for `sagessd firmware calibrate`.
//!
//! QEMU's instruction count is exact and repeatable; its timing is not the board's. So the
//! plugin counts, per segment of the run (see [`profile`]), the instructions the firmware
//! executed and what their fetches and data accesses did in a modelled A9 cache hierarchy
//! ([`cache_model`]); the CLI turns those counts into cycles with the hardware description's
//! latencies. Load it with
//!
//! ```plain
//! qemu-system-arm -M vexpress-a9 ... -plugin libsagessd_qemu_a9_profile.so,marks=0x60001000,
//!     out=profile.txt,l1i=32768:4:32,l1d=32768:4:32,l2=524288:8:32[,attribute=31:33]
//! ```
//!
//! (`attribute=` names the segments also counted per instruction address, `:`-separated.)
//!
//! It is written against the plugin API version 1 (QEMU 7.x, Debian bookworm's 7.2): the few
//! entry points it calls are declared below from the API's documentation (QEMU's
//! `docs/devel/tcg-plugins.rst` and `include/qemu/qemu-plugin.h`), and QEMU resolves them
//! when it loads the plugin. The guest must run on one vCPU (checked at install), so the
//! callbacks never run concurrently.

pub mod cache_model;
pub mod profile;

use std::cell::UnsafeCell;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};

use cache_model::CacheGeometry;
use profile::Profile;

/// QEMU's opaque translation block handle.
#[repr(C)]
struct QemuTb {
    _opaque: [u8; 0],
}

/// QEMU's opaque instruction handle.
#[repr(C)]
struct QemuInsn {
    _opaque: [u8; 0],
}

/// `QEMU_PLUGIN_CB_NO_REGS`: the callbacks read no guest registers.
const CB_NO_REGS: c_int = 0;
/// `QEMU_PLUGIN_MEM_RW`: call back on loads and stores.
const MEM_RW: c_int = 3;

type TbTransCb = extern "C" fn(id: u64, tb: *mut QemuTb);
type InsnExecCb = extern "C" fn(vcpu: c_uint, userdata: *mut c_void);
type MemCb = extern "C" fn(vcpu: c_uint, info: u32, vaddr: u64, userdata: *mut c_void);
type AtExitCb = extern "C" fn(id: u64, userdata: *mut c_void);

unsafe extern "C" {
    fn qemu_plugin_register_vcpu_tb_trans_cb(id: u64, cb: TbTransCb);
    fn qemu_plugin_tb_n_insns(tb: *const QemuTb) -> usize;
    fn qemu_plugin_tb_get_insn(tb: *const QemuTb, index: usize) -> *mut QemuInsn;
    fn qemu_plugin_insn_vaddr(insn: *const QemuInsn) -> u64;
    fn qemu_plugin_register_vcpu_insn_exec_cb(
        insn: *mut QemuInsn,
        cb: InsnExecCb,
        flags: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_register_vcpu_mem_cb(
        insn: *mut QemuInsn,
        cb: MemCb,
        flags: c_int,
        rw: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_mem_is_store(info: u32) -> bool;
    fn qemu_plugin_register_atexit_cb(id: u64, cb: AtExitCb, userdata: *mut c_void);
    fn qemu_plugin_n_vcpus() -> c_int;
    fn qemu_plugin_outs(text: *const c_char);
}

/// The API version this plugin is written for (QEMU checks it at load).
#[unsafe(no_mangle)]
pub static qemu_plugin_version: c_int = 1;

/// The run's profile and where to write it.
struct State {
    profile: Profile,
    out: String,
}

/// The one profile of the run. Written only from QEMU's callbacks, which run on the single
/// vCPU's thread (one vCPU is checked at install) or at exit, after the guest stopped.
struct Global(UnsafeCell<Option<State>>);

// SAFETY: see `Global`: every access happens on one thread at a time.
unsafe impl Sync for Global {}

static STATE: Global = Global(UnsafeCell::new(None));

fn with_state(f: impl FnOnce(&mut State)) {
    // SAFETY: callbacks are never concurrent (one vCPU) and never reentrant (none calls back
    // into QEMU), so this is the only live reference.
    if let Some(state) = unsafe { &mut *STATE.0.get() } {
        f(state);
    }
}

extern "C" fn on_insn(_vcpu: c_uint, userdata: *mut c_void) {
    with_state(|s| s.profile.instruction(userdata as u64));
}

extern "C" fn on_mem(_vcpu: c_uint, info: u32, vaddr: u64, userdata: *mut c_void) {
    // SAFETY: `info` is the handle QEMU passed to this callback.
    let store = unsafe { qemu_plugin_mem_is_store(info) };
    with_state(|s| s.profile.memory(vaddr, store, userdata as u64));
}

extern "C" fn on_translate(_id: u64, tb: *mut QemuTb) {
    // SAFETY: `tb` is the block QEMU is translating; its instructions are valid during this
    // callback, which is when QEMU allows registering per-instruction callbacks.
    unsafe {
        for i in 0..qemu_plugin_tb_n_insns(tb) {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            let address = qemu_plugin_insn_vaddr(insn);
            qemu_plugin_register_vcpu_insn_exec_cb(
                insn,
                on_insn,
                CB_NO_REGS,
                address as usize as *mut c_void,
            );
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                on_mem,
                CB_NO_REGS,
                MEM_RW,
                address as usize as *mut c_void,
            );
        }
    }
}

fn say(text: &str) {
    if let Ok(c) = CString::new(text) {
        // SAFETY: a NUL-terminated string that lives across the call.
        unsafe { qemu_plugin_outs(c.as_ptr()) };
    }
}

extern "C" fn on_exit(_id: u64, _userdata: *mut c_void) {
    with_state(|s| {
        if let Err(e) = std::fs::write(&s.out, s.profile.report()) {
            say(&format!(
                "sagessd-qemu-a9-profile: cannot write {}: {e}\n",
                s.out
            ));
        }
    });
}

/// The plugin's arguments.
fn parse_args(args: &[String]) -> Result<State, String> {
    let mut marks = None;
    let mut out = None;
    let (mut l1i, mut l1d, mut l2) = (None, None, None);
    let mut attribute = Vec::new();
    for arg in args {
        let (key, value) = arg
            .split_once('=')
            .ok_or_else(|| format!("argument {arg:?} is not key=value"))?;
        match key {
            "marks" => {
                let hex = value.trim_start_matches("0x");
                marks = Some(
                    u64::from_str_radix(hex, 16)
                        .map_err(|e| format!("marks={value}: not a hex address ({e})"))?,
                );
            }
            "out" => out = Some(value.to_string()),
            "l1i" => l1i = Some(CacheGeometry::parse(value)?),
            "l1d" => l1d = Some(CacheGeometry::parse(value)?),
            "l2" => l2 = Some(CacheGeometry::parse(value)?),
            "attribute" => {
                for k in value.split(':') {
                    attribute.push(k.parse().map_err(|e| {
                        format!("attribute={value}: {k:?} is not a segment number ({e})")
                    })?);
                }
            }
            _ => return Err(format!("unknown argument {key:?}")),
        }
    }
    let need = |what: &str| format!("the {what}= argument is required");
    Ok(State {
        profile: Profile::new(
            marks.ok_or_else(|| need("marks"))?,
            l1i.ok_or_else(|| need("l1i"))?,
            l1d.ok_or_else(|| need("l1d"))?,
            l2.ok_or_else(|| need("l2"))?,
            attribute,
        ),
        out: out.ok_or_else(|| need("out"))?,
    })
}

/// QEMU's entry point: parses the arguments and registers the callbacks; non-zero refuses the
/// load (QEMU then exits with the message printed here).
///
/// # Safety
///
/// Called by QEMU with `argc` valid C strings in `argv`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_install(
    id: u64,
    _info: *const c_void,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    let args: Vec<String> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            // SAFETY: QEMU passes `argc` valid NUL-terminated strings.
            unsafe { CStr::from_ptr(*argv.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // SAFETY: a plain query.
    let vcpus = unsafe { qemu_plugin_n_vcpus() };
    let state = if vcpus == 1 {
        parse_args(&args)
    } else {
        Err(format!(
            "the guest has {vcpus} vCPUs; the profile needs exactly 1"
        ))
    };
    match state {
        Ok(state) => {
            // SAFETY: install runs before any callback, on QEMU's main thread.
            unsafe { *STATE.0.get() = Some(state) };
            // SAFETY: registering callbacks with the id QEMU gave.
            unsafe {
                qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
                qemu_plugin_register_atexit_cb(id, on_exit, core::ptr::null_mut());
            }
            0
        }
        Err(e) => {
            say(&format!("sagessd-qemu-a9-profile: {e}\n"));
            -1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_are_checked() {
        let good = [
            "marks=0x60001000",
            "out=/tmp/p",
            "l1i=32768:4:32",
            "l1d=32768:4:32",
            "l2=524288:8:32",
        ];
        assert!(parse_args(&strings(&good)).is_ok());
        let err = |args: &[&str]| parse_args(&strings(args)).err().unwrap_or_default();
        assert!(err(&good[1..]).contains("marks="));
        assert!(err(&["marks=zz"]).contains("not a hex address"));
        assert!(err(&["bogus=1"]).contains("unknown argument"));
        assert!(err(&["l2"]).contains("not key=value"));
        let mut attributed = strings(&good);
        attributed.push("attribute=31:33".into());
        assert!(parse_args(&attributed).is_ok());
        assert!(err(&["attribute=3:x"]).contains("not a segment number"));
    }
}
