#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, broker+controller in one JVM) for development and CI.
# No Docker: the jars come from Maven Central via ./pom.xml and are cached outside the repo.
# See README.md next to this file.
#
#   kafka.sh start | stop | restart | status | bootstrap | reset | tool <MainClass> [args...]
set -euo pipefail

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
POM="$HERE/pom.xml"
TEMPLATE="$HERE/server.properties.template"
BROKER_LOG4J="$HERE/log4j2.properties"
TOOLS_LOG4J="$HERE/tools-log4j2.properties"

KAFKA_VERSION=$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$POM" | head -n 1)
[[ -n $KAFKA_VERSION ]] || { echo "local-kafka: cannot read <kafka.version> from $POM" >&2; exit 2; }

abspath() { if [[ $1 == /* ]]; then printf '%s\n' "$1"; else printf '%s\n' "$PWD/$1"; fi; }

KAFKA_HOME=$(abspath "${LITTLE_KAFKA_HOME:-$HOME/.cache/little/kafka-$KAFKA_VERSION}")
DATA=$(abspath "${LITTLE_KAFKA_DATA:-$HOME/.cache/little/kafka-run}")
DATA=${DATA%/}
HOST=127.0.0.1
PORT=${LITTLE_KAFKA_PORT:-39092}
CONTROLLER_PORT=${LITTLE_KAFKA_CONTROLLER_PORT:-39093}
HEAP=${LITTLE_KAFKA_HEAP:-768m}
START_TIMEOUT=${LITTLE_KAFKA_START_TIMEOUT:-60}
STOP_TIMEOUT=${LITTLE_KAFKA_STOP_TIMEOUT:-30}
PROBE=${LITTLE_KAFKA_PROBE:-auto} # auto | python | java
CDS=${LITTLE_KAFKA_CDS:-1}         # 1: AppCDS archive of the broker's classes (faster restarts)
SECURITY=${LITTLE_KAFKA_SECURITY:-plaintext} # plaintext | sasl_ssl (SCRAM-SHA-512 over TLS)
SCRAM_USER=${LITTLE_KAFKA_SCRAM_USER:-little}

LIBS="$KAFKA_HOME/libs"
LIBS_MARKER="$LIBS/.little-complete"
PID_FILE="$DATA/broker.pid"
LOG_FILE="$DATA/broker.log"
PROPS="$DATA/server.properties"
LOG_DIRS="$DATA/kraft-logs"
DATA_MARKER="$DATA/.little-local-kafka"
TLS_DIR="$DATA/tls"
SECURITY_MARKER="$DATA/.security"
CDS_ARCHIVE="$KAFKA_HOME/cds/broker.jsa"
CDS_NEW="$DATA/broker.jsa.new"
# Unique per data dir: identifies "our" broker JVM in `ps` output even without a pid file.
# The trailing slash keeps /x/run from matching /x/run2.
PROC_MARKER="-Dlittle.local.kafka.data=$DATA/"

if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi

log() { printf 'local-kafka: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

for v in PORT CONTROLLER_PORT START_TIMEOUT STOP_TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number, got '${!v}'"
done
[[ $PORT != "$CONTROLLER_PORT" ]] || die "LITTLE_KAFKA_PORT and LITTLE_KAFKA_CONTROLLER_PORT must differ"
[[ $SECURITY == plaintext || $SECURITY == sasl_ssl ]] ||
  die "LITTLE_KAFKA_SECURITY must be plaintext or sasl_ssl, got '$SECURITY'"
[[ $SCRAM_USER =~ ^[A-Za-z0-9._-]+$ ]] || die "LITTLE_KAFKA_SCRAM_USER may hold only letters, digits, '.', '_' and '-'"

# ---------------------------------------------------------------------------------------------
# Locking (best effort: flock(1) is util-linux; without it we simply run unlocked).

lock_fd() { # lock_fd <fd> <file>
  command -v flock >/dev/null 2>&1 || return 0
  eval "exec $1>>\"\$2\""
  flock -w 300 "$1" || die "timed out waiting for lock $2"
}

# ---------------------------------------------------------------------------------------------
# Jars

ensure_libs() {
  local want
  want=$(cksum <"$POM")
  libs_ok() {
    [[ -f $LIBS_MARKER && "$(cat "$LIBS_MARKER")" == "$want" && -f $LIBS/kafka_2.13-$KAFKA_VERSION.jar ]]
  }
  if libs_ok; then return 0; fi
  mkdir -p "$KAFKA_HOME"
  lock_fd 8 "$KAFKA_HOME/.lock"
  # Re-check: another process may have resolved while we waited for the lock.
  if libs_ok; then exec 8>&-; return 0; fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found; needed once to fetch Kafka $KAFKA_VERSION jars into $LIBS"
  log "resolving Kafka $KAFKA_VERSION jars with Maven into $LIBS"
  local tmp
  tmp=$(mktemp -d "$KAFKA_HOME/libs.tmp.XXXXXX")
  if ! mvn -q -B -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$tmp" >"$KAFKA_HOME/mvn.log" 2>&1; then
    tail -n 50 "$KAFKA_HOME/mvn.log" >&2
    rm -rf "$tmp"
    die "Maven dependency resolution failed (full log: $KAFKA_HOME/mvn.log)"
  fi
  [[ -f $tmp/kafka_2.13-$KAFKA_VERSION.jar && -f $tmp/kafka-tools-$KAFKA_VERSION.jar ]] ||
    { rm -rf "$tmp"; die "Maven finished but kafka jars are missing (see $KAFKA_HOME/mvn.log)"; }
  rm -rf "$LIBS" "$CDS_ARCHIVE"
  chmod 755 "$tmp"
  mv "$tmp" "$LIBS"
  printf '%s\n' "$want" >"$LIBS_MARKER"
  exec 8>&-
}

# JVM options shared by the broker and short-lived tools: fast startup over peak throughput.
common_jvm_opts() {
  JVM_OPTS=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData -Xshare:auto
    -Djava.awt.headless=true)
}

need_java() {
  command -v "$JAVA" >/dev/null 2>&1 || die "java not found (Kafka $KAFKA_VERSION needs Java 17+; set JAVA_HOME or PATH)"
}

run_tool() { # run_tool <MainClass> [args...]  (foreground; stdout/stderr inherited)
  need_java
  ensure_libs
  local JVM_OPTS runner=()
  common_jvm_opts
  # `kafka.sh tool` replaces the shell with the JVM so signals (timeouts, Ctrl-C) reach it.
  [[ ${TOOL_EXEC:-0} == 1 ]] && runner=(exec)
  # shellcheck disable=SC2086  # LITTLE_KAFKA_TOOL_OPTS is intentionally word-split
  ${runner[@]+"${runner[@]}"} "$JAVA" "${JVM_OPTS[@]}" -Xmx256m ${LITTLE_KAFKA_TOOL_OPTS:-} \
    -Dlog4j2.configurationFile="$TOOLS_LOG4J" -cp "$LIBS/*" "$@"
}

# ---------------------------------------------------------------------------------------------
# AppCDS (JDK 13+ dynamic archive): the first broker run dumps its loaded classes at exit into
# $CDS_NEW; `stop` validates it and installs it as $CDS_ARCHIVE, which later starts map directly
# (~1 s faster on a 2-core box). An archive the JVM cannot use (other JDK build, other jars) is
# detected by a -Xshare:on dry run (~0.1 s) and rebuilt. LITTLE_KAFKA_CDS=0 disables all of it.

cds_valid() { # cds_valid <archive>: this JDK + classpath can map the archive
  local JVM_OPTS
  common_jvm_opts
  "$JAVA" "${JVM_OPTS[@]}" -Xshare:on -XX:SharedArchiveFile="$1" -cp "$LIBS/*" -version >/dev/null 2>&1
}

cds_install() { # move a freshly dumped archive into the jar cache (broker must be stopped)
  [[ -e $CDS_NEW ]] || return 0
  if [[ $CDS == 1 && ! -f $CDS_ARCHIVE && -s $CDS_NEW ]] && cds_valid "$CDS_NEW"; then
    local tmp="$CDS_ARCHIVE.tmp.$$"
    mkdir -p "${CDS_ARCHIVE%/*}"
    if cp "$CDS_NEW" "$tmp" && mv -f "$tmp" "$CDS_ARCHIVE"; then
      log "saved class-data-sharing archive $CDS_ARCHIVE (faster next start)"
    fi
    rm -f "$tmp"
  fi
  rm -f "$CDS_NEW"
}

cds_opts() { # sets CDS_OPTS for the broker JVM
  CDS_OPTS=()
  [[ $CDS == 1 ]] || return 0
  rm -f "$CDS_NEW"
  if [[ -f $CDS_ARCHIVE ]]; then
    if cds_valid "$CDS_ARCHIVE"; then
      CDS_OPTS=(-XX:SharedArchiveFile="$CDS_ARCHIVE" '-Xlog:cds*=off')
      return 0
    fi
    rm -f "$CDS_ARCHIVE"
  fi
  CDS_OPTS=(-XX:ArchiveClassesAtExit="$CDS_NEW" '-Xlog:cds*=off')
}

# ---------------------------------------------------------------------------------------------
# Process bookkeeping

is_alive() { # is_alive <pid>   (zombies count as dead)
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ -n $stat && $stat != Z* ]]
}

is_ours() { # is_ours <pid>: the process command line carries our per-data-dir marker
  local args
  args=$(ps -ww -o args= -p "$1" 2>/dev/null) || return 1
  [[ "$args " == *" -Dlittle.local.kafka=1 "* && "$args " == *" $PROC_MARKER "* ]]
}

pid_from_file() { # prints the pid if the pid file names a live broker of ours
  [[ -f $PID_FILE ]] || return 1
  local pid
  pid=$(tr -cd '0-9' <"$PID_FILE")
  [[ -n $pid ]] && is_alive "$pid" && is_ours "$pid" && printf '%s\n' "$pid"
}

marker_pids() { # all live broker JVMs of ours for this data dir, found by command line
  local listing pid args
  listing=$(ps -ww -eo pid=,args= 2>/dev/null) || return 0
  while read -r pid args; do
    [[ $pid == "$$" ]] && continue
    if [[ "$args " == *" -Dlittle.local.kafka=1 "* && "$args " == *" $PROC_MARKER "* ]] && is_alive "$pid"; then
      printf '%s\n' "$pid"
    fi
  done <<<"$listing"
}

running_pid() { # the broker pid (pid file first, else adopt one found by marker)
  local pid
  if pid=$(pid_from_file); then printf '%s\n' "$pid"; return 0; fi
  pid=$(marker_pids)
  pid=${pid%%$'\n'*}
  [[ -n $pid ]] && printf '%s\n' "$pid"
}

port_open() { # port_open <port>: something accepts TCP connections on 127.0.0.1:<port>
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# ---------------------------------------------------------------------------------------------
# Readiness probe: a real Metadata request that must list at least one (unfenced) broker.

PY_PROBE='
import socket, struct, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    s.settimeout(3)
    cid = b"little-probe"
    # Metadata v4 (request header v1): topics=[] (none), allow_auto_topic_creation=false
    req = struct.pack(">hhih", 3, 4, 7, len(cid)) + cid + struct.pack(">ib", 0, 0)
    s.sendall(struct.pack(">i", len(req)) + req)
    def read(n):
        b = b""
        while len(b) < n:
            c = s.recv(n - len(b))
            if not c:
                raise EOFError
            b += c
        return b
    size, = struct.unpack(">i", read(4))
    corr, _throttle, nbrokers = struct.unpack(">iii", read(size)[:12])
    sys.exit(0 if corr == 7 and nbrokers >= 1 else 1)
except Exception:
    sys.exit(1)
'

have_python() { command -v python3 >/dev/null 2>&1; }

probe() {
  local mode=$PROBE
  if [[ $mode == auto ]]; then if have_python; then mode=python; else mode=java; fi; fi
  [[ $SECURITY == sasl_ssl ]] && mode=java # the raw probe speaks PLAINTEXT only
  port_open "$PORT" || return 1
  if [[ $mode == python ]]; then
    python3 -c "$PY_PROBE" "$HOST" "$PORT" 2>/dev/null
  else
    local cfg="$DATA/probe-client.properties"
    if [[ $SECURITY == sasl_ssl ]]; then
      cfg="$TLS_DIR/probe-client.properties"
      [[ -f $cfg ]] || java_client_properties >"$cfg"
    fi
    [[ -f $cfg ]] || printf '%s\n' 'request.timeout.ms=5000' 'default.api.timeout.ms=10000' >"$cfg"
    run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$HOST:$PORT" \
      --command-config "$cfg" --list >/dev/null 2>&1
  fi
}

# ---------------------------------------------------------------------------------------------
# Data dir / config / storage

init_data() {
  if [[ -d $DATA && ! -e $DATA_MARKER && -n "$(ls -A "$DATA" 2>/dev/null)" ]]; then
    die "$DATA exists, is not empty and was not created by kafka.sh; refusing to use it"
  fi
  mkdir -p "$DATA"
  : >>"$DATA_MARKER"
}

sed_escape() { printf '%s' "$1" | sed -e 's/[\\&|]/\\&/g'; }

render_config() {
  local tmp="$PROPS.tmp"
  sed -e "s|@PORT@|$PORT|g" \
      -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
      -e "s|@LOG_DIRS@|$(sed_escape "$LOG_DIRS")|g" \
      "$TEMPLATE" >"$tmp"
  if [[ $SECURITY == sasl_ssl ]]; then
    # The client listener becomes SASL_SSL (SCRAM-SHA-512 over TLS); the broker talks to
    # itself on it as $SCRAM_USER. The controller listener stays PLAINTEXT on 127.0.0.1.
    sed -i -e 's|PLAINTEXT://127.0.0.1:'"$PORT"'|SASL_SSL://127.0.0.1:'"$PORT"'|g' \
        -e 's|^inter.broker.listener.name=.*|inter.broker.listener.name=SASL_SSL|' \
        -e 's|^listener.security.protocol.map=.*|listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL|' \
        "$tmp"
    local store_pass
    store_pass=$(cat "$TLS_DIR/store.pass")
    cat >>"$tmp" <<EOF

############################# SASL_SSL (LITTLE_KAFKA_SECURITY=sasl_ssl) #############################
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$SCRAM_USER" password="$(scram_password)";
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=$store_pass
ssl.key.password=$store_pass
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.client.auth=none
EOF
  fi
  mv "$tmp" "$PROPS"
  chmod 600 "$PROPS"
}

# ---------------------------------------------------------------------------------------------
# SASL_SSL: a CA and a broker certificate made here (keytool, from the JDK) on first start,
# and the SCRAM user written into the KRaft storage when it is formatted.

scram_password() {
  if [[ -n ${LITTLE_KAFKA_SCRAM_PASSWORD:-} ]]; then printf '%s' "$LITTLE_KAFKA_SCRAM_PASSWORD"; else cat "$TLS_DIR/scram.pass"; fi
}

ensure_tls() {
  [[ $SECURITY == sasl_ssl ]] || return 0
  if [[ -n ${LITTLE_KAFKA_SCRAM_PASSWORD:-} && ! $LITTLE_KAFKA_SCRAM_PASSWORD =~ ^[A-Za-z0-9._~+=-]+$ ]]; then
    die "LITTLE_KAFKA_SCRAM_PASSWORD may hold only letters, digits and . _ ~ + = -"
  fi
  [[ -f $TLS_DIR/ca.pem && -f $TLS_DIR/broker.p12 ]] && return 0
  command -v keytool >/dev/null 2>&1 || die "keytool (from the JDK) is needed to make the TLS certificates"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  local pass
  pass=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  printf '%s\n' "$pass" >"$TLS_DIR/store.pass"
  [[ -n ${LITTLE_KAFKA_SCRAM_PASSWORD:-} ]] ||
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$TLS_DIR/scram.pass"
  local k=(keytool -storetype PKCS12 -storepass "$pass" -keypass "$pass" -noprompt)
  log "making a self-signed CA and a broker certificate for 127.0.0.1 in $TLS_DIR"
  {
    "${k[@]}" -genkeypair -keystore "$TLS_DIR/ca.p12" -alias ca -keyalg RSA -keysize 2048 \
      -dname "CN=little local-kafka CA" -ext bc:c -validity 30
    "${k[@]}" -exportcert -rfc -keystore "$TLS_DIR/ca.p12" -alias ca -file "$TLS_DIR/ca.pem"
    "${k[@]}" -genkeypair -keystore "$TLS_DIR/broker.p12" -alias broker -keyalg RSA -keysize 2048 \
      -dname "CN=127.0.0.1" -validity 30
    "${k[@]}" -certreq -keystore "$TLS_DIR/broker.p12" -alias broker -file "$TLS_DIR/broker.csr"
    "${k[@]}" -gencert -keystore "$TLS_DIR/ca.p12" -alias ca -infile "$TLS_DIR/broker.csr" \
      -outfile "$TLS_DIR/broker.crt" -rfc -validity 30 -ext san=ip:127.0.0.1,dns:localhost
    "${k[@]}" -importcert -keystore "$TLS_DIR/broker.p12" -alias ca -file "$TLS_DIR/ca.pem"
    "${k[@]}" -importcert -keystore "$TLS_DIR/broker.p12" -alias broker -file "$TLS_DIR/broker.crt"
  } >"$TLS_DIR/keytool.log" 2>&1 || { cat "$TLS_DIR/keytool.log" >&2; die "keytool failed (see $TLS_DIR/keytool.log)"; }
}

java_client_properties() { # a Java client's settings for the SASL_SSL listener (probe, tools)
  printf '%s\n' 'request.timeout.ms=5000' 'default.api.timeout.ms=10000' \
    'security.protocol=SASL_SSL' 'sasl.mechanism=SCRAM-SHA-512' \
    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$SCRAM_USER\" password=\"$(scram_password)\";" \
    'ssl.truststore.type=PEM' "ssl.truststore.location=$TLS_DIR/ca.pem"
}

check_security_mode() { # the listener's security is fixed when the storage is formatted
  [[ -f $LOG_DIRS/meta.properties ]] || return 0
  local was=plaintext
  [[ -f $SECURITY_MARKER ]] && was=$(cat "$SECURITY_MARKER")
  [[ $was == "$SECURITY" ]] ||
    die "$DATA was formatted with LITTLE_KAFKA_SECURITY=$was, not $SECURITY: use another LITTLE_KAFKA_DATA or \`kafka.sh reset\`"
}

cmd_client_env() { # the LITTLE_KAFKA_* client settings for this broker
  [[ $SECURITY == sasl_ssl ]] || { printf '%s\n' "LITTLE_KAFKA_SECURITY_PROTOCOL=PLAINTEXT"; return 0; }
  [[ -f $TLS_DIR/ca.pem ]] || die "no certificates yet in $TLS_DIR: run \`kafka.sh start\` first"
  printf '%s\n' "LITTLE_KAFKA_SECURITY_PROTOCOL=SASL_SSL" "LITTLE_KAFKA_SASL_MECHANISM=SCRAM-SHA-512" \
    "LITTLE_KAFKA_SASL_USERNAME=$SCRAM_USER" "LITTLE_KAFKA_SASL_PASSWORD=$(scram_password)" \
    "LITTLE_KAFKA_SSL_CA_LOCATION=$TLS_DIR/ca.pem"
}

format_storage_if_needed() {
  [[ -f $LOG_DIRS/meta.properties ]] && return 0
  rm -rf "$LOG_DIRS" # leftovers of an interrupted format, if any
  local cid
  cid=$(run_tool kafka.tools.StorageTool random-uuid 2>>"$DATA/format.log") ||
    die "kafka-storage random-uuid failed (see $DATA/format.log)"
  log "formatting KRaft storage in $LOG_DIRS (cluster id $cid)"
  local scram=()
  [[ $SECURITY == sasl_ssl ]] &&
    scram=(--add-scram "SCRAM-SHA-512=[name=$SCRAM_USER,password=$(scram_password)]")
  if ! run_tool kafka.tools.StorageTool format -t "$cid" -c "$PROPS" --standalone \
      ${scram[@]+"${scram[@]}"} >>"$DATA/format.log" 2>&1; then
    tail -n 50 "$DATA/format.log" >&2
    die "kafka-storage format failed (see $DATA/format.log)"
  fi
  printf '%s\n' "$SECURITY" >"$SECURITY_MARKER"
}

# ---------------------------------------------------------------------------------------------
# Commands

print_log_tail() {
  if [[ -f $LOG_FILE ]]; then
    log "last 50 lines of $LOG_FILE:"
    tail -n 50 "$LOG_FILE" >&2
  fi
}

wait_ready() { # wait_ready <pid>
  local pid=$1 deadline=$((SECONDS + START_TIMEOUT + 1))
  while ((SECONDS < deadline)); do
    if ! is_alive "$pid"; then
      # setsid may have forked: look for the JVM by its marker before giving up.
      local other
      other=$(marker_pids)
      other=${other%%$'\n'*}
      if [[ -n $other ]]; then pid=$other; printf '%s\n' "$pid" >"$PID_FILE"; continue; fi
      print_log_tail
      rm -f "$PID_FILE"
      die "broker process exited during startup"
    fi
    if probe; then return 0; fi
    if [[ $PROBE == java ]] || ! have_python; then sleep 0.5; else sleep 0.2; fi
  done
  print_log_tail
  log "broker (pid $pid) did not answer a metadata request on $HOST:$PORT within ${START_TIMEOUT}s; stopping it"
  stop_pids "$pid"
  rm -f "$PID_FILE"
  die "start failed (raise LITTLE_KAFKA_START_TIMEOUT on slow machines)"
}

cmd_start() {
  init_data
  lock_fd 9 "$DATA/.lock"
  local pid
  if pid=$(running_pid); then
    printf '%s\n' "$pid" >"$PID_FILE"
    if ! probe; then
      log "broker already running (pid $pid) but not answering yet; waiting"
      wait_ready "$pid"
    fi
    printf '%s:%s\n' "$HOST" "$PORT"
    return 0
  fi
  rm -f "$PID_FILE"
  local p
  for p in "$PORT" "$CONTROLLER_PORT"; do
    port_open "$p" && die "port $HOST:$p is already in use by another process (set LITTLE_KAFKA_PORT / LITTLE_KAFKA_CONTROLLER_PORT)"
  done

  need_java
  ensure_libs
  check_security_mode
  ensure_tls
  render_config
  format_storage_if_needed

  cds_install || true # a previous broker may have exited on its own after dumping
  local JVM_OPTS CDS_OPTS
  common_jvm_opts
  cds_opts
  local setsid=()
  command -v setsid >/dev/null 2>&1 && setsid=(setsid)
  [[ -f $LOG_FILE ]] && mv -f "$LOG_FILE" "$LOG_FILE.1"
  log "starting broker on $HOST:$PORT (log: $LOG_FILE)"
  # fds 8/9 hold our locks: never let the long-lived JVM inherit them.
  # ${a[@]+...} guards empty arrays under `set -u` on bash 3.2 (macOS, which also lacks setsid).
  # shellcheck disable=SC2086  # LITTLE_KAFKA_JAVA_OPTS is intentionally word-split
  (cd "$DATA" && exec nohup ${setsid[@]+"${setsid[@]}"} "$JAVA" -Dlittle.local.kafka=1 "$PROC_MARKER" \
      "-Xms${LITTLE_KAFKA_HEAP_MIN:-128m}" "-Xmx$HEAP" "${JVM_OPTS[@]}" ${CDS_OPTS[@]+"${CDS_OPTS[@]}"} \
      -XX:+ExitOnOutOfMemoryError ${LITTLE_KAFKA_JAVA_OPTS:-} \
      -Dlog4j2.configurationFile="$BROKER_LOG4J" -Dkafka.logs.dir="$DATA" \
      -cp "$LIBS/*" kafka.Kafka "$PROPS" \
      >>"$LOG_FILE" 2>&1 </dev/null 8>&- 9>&-) &
  pid=$!
  printf '%s\n' "$pid" >"$PID_FILE"
  wait_ready "$pid"
  printf '%s:%s\n' "$HOST" "$PORT"
}

stop_pids() { # stop_pids <pid>...: SIGTERM, wait, SIGKILL
  local deadline=$((SECONDS + STOP_TIMEOUT + 1)) p alive
  kill -TERM "$@" 2>/dev/null || true
  while :; do
    alive=()
    for p in "$@"; do is_alive "$p" && alive+=("$p"); done
    ((${#alive[@]} == 0)) && return 0
    ((SECONDS >= deadline)) && break
    sleep 0.2
  done
  log "broker did not exit within ${STOP_TIMEOUT}s; sending SIGKILL to ${alive[*]}"
  kill -KILL "${alive[@]}" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    alive=()
    for p in "$@"; do is_alive "$p" && alive+=("$p"); done
    ((${#alive[@]} == 0)) && return 0
    sleep 0.5
  done
  die "could not kill ${alive[*]}"
}

cmd_stop() {
  [[ -e $DATA_MARKER ]] && lock_fd 9 "$DATA/.lock"
  local pids=() p
  if p=$(pid_from_file); then pids+=("$p"); fi
  while read -r p; do
    [[ -n $p && " ${pids[*]:-} " != *" $p "* ]] && pids+=("$p")
  done < <(marker_pids)
  if ((${#pids[@]} == 0)); then
    rm -f "$PID_FILE"
    log "not running"
    return 0
  fi
  log "stopping broker (pid ${pids[*]})"
  stop_pids "${pids[@]}"
  rm -f "$PID_FILE"
  cds_install || true
  log "stopped"
}

cmd_status() {
  local pid
  if ! pid=$(running_pid); then
    log "not running (data: $DATA)"
    return 3
  fi
  if probe; then
    log "running, pid $pid, bootstrap $HOST:$PORT (log: $LOG_FILE)"
    return 0
  fi
  log "process $pid is alive but $HOST:$PORT does not answer metadata requests (log: $LOG_FILE)"
  return 1
}

cmd_reset() {
  cmd_stop
  [[ -d $DATA ]] || return 0
  [[ -e $DATA_MARKER ]] || die "$DATA was not created by kafka.sh; not deleting it"
  rm -rf "$DATA"
  log "deleted $DATA"
}

usage() {
  cat >&2 <<EOF
usage: $0 <command>
  start                 start the broker (idempotent) and print the bootstrap address
  stop                  stop the broker (idempotent)
  restart               stop, then start
  status                exit 0 if running and answering, 3 if not running, 1 if unhealthy
  bootstrap             print the bootstrap address ($HOST:$PORT)
  client-env            print the LITTLE_KAFKA_* client settings for this broker (with
                        LITTLE_KAFKA_SECURITY=sasl_ssl: protocol, mechanism, user, password, CA)
  reset                 stop and delete the data dir ($DATA)
  tool <MainClass> ...  run a Kafka tool class from the cached jars, e.g.
                        tool org.apache.kafka.tools.TopicCommand --bootstrap-server $HOST:$PORT --list
EOF
}

main() {
  local cmd=${1:-}
  [[ $# -gt 0 ]] && shift
  case $cmd in
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    bootstrap) printf '%s:%s\n' "$HOST" "$PORT" ;;
    client-env) cmd_client_env ;;
    reset) cmd_reset ;;
    tool)
      [[ $# -ge 1 ]] || { usage; exit 2; }
      TOOL_EXEC=1 run_tool "$@"
      ;;
    -h | --help | help) usage ;;
    *) usage; exit 2 ;;
  esac
}

main "$@"
