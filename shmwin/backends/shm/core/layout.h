/* GENERATED from shmwin/backends/shm/format.py by format_c.py: do not edit. To write it anew:
 *     python shmwin/backends/shm/format_c.py shmwin/backends/shm/core/layout.h
 * tests/unit/test_layout.py holds it fresh; _core.LAYOUT hands these values back. */
#ifndef SHMWIN_LAYOUT_H
#define SHMWIN_LAYOUT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define FORMAT_VERSION               11
#define WORD_BYTES                   8
#define PAGE_BYTES                   4096
#define HEADER_BYTES                 4096
#define CRC_START                    32
#define CRC_END                      1024
#define MAX_FIELDS                   16
#define FIELD_NAME_BYTES             32
#define MAX_RINGS                    8
#define MAX_BUCKETS                  1000000
#define MAX_LOG_ENTRIES              4096
#define MAX_STRIPES                  1024
#define MAX_CAPACITY                 50000000
#define MAX_KEY_LOCKS                64
#define INDEX_MIN_SLOTS              64
#define MAX_PROBES                   256
#define MAX_STORED_KEY               32
#define KEY_DIGEST_BYTES             16
#define KEY_LONG_PREFIX              16
#define KEY_HASH_BITS                37
#define ENTRY_ROW_BITS               26
#define KEY_HASH_MASK                INT64_C(137438953471)
#define ENTRY_ROW_MASK               67108863
#define IDENT_LEN_SHIFT              40
#define IDENT_FLAGS_SHIFT            48
#define MAX_GEN                      INT64_C(4611686018427387904)
#define MAX_NOW_NS                   INT64_C(4611686018427387904)
#define MAX_SPAN_NS                  INT64_C(1152921504606846976)
#define EMPTY_EPOCH                  (-INT64_C(9223372036854775807) - 1)
#define FULL_DENY_COUNT              INT64_C(4611686018427387904)
#define RING_LOG                     1
#define LIVE_MOVED                   INT64_C(4611686018427387904)
#define KEY_FLAG_STR                 1
#define KEY_FLAG_DIGEST              2
#define LOCK_STRIPE_TABLE            0
#define LOCK_KEY_TABLE               0
#define LOCK_SHARED_ROW              1
#define LOCK_CHUNKS                  1
#define FIRST_KEY_LOCK               2
#define SLOT_EPOCH                   0
#define SLOT_VALUES                  1
#define WINDOW_HEAD_SLOTS            1
#define LIMITER_HEAD_SLOTS           2
#define RING_HEAD_SLOT               0
#define RING_TAIL_SLOT               1
#define LOG_TIME                     0
#define LOG_HITS                     1
#define LOG_HDR_POS                  0
#define LOG_HDR_TOTAL                1
#define LOG_HDR_DEAD_TIME            2
#define LOG_HDR_DEAD_HITS            3
#define LOG_HDR_WORDS                4
#define RING_ENTRY_BYTES             24
#define LOCK_BYTES                   64
#define STRIPE_ENTRY_BYTES           128
#define KEY_ENTRY_BYTES              16
#define INDEX_ENTRY_WORDS            2
#define KEY_HEADER_BYTES             56
#define FIXED_HEADER_END             192
#define FIXED_STATE_BYTES            16
#define SLIDING_STATE_BYTES          24
#define CONC_STATE_BYTES             8
#define CONC_HOLDER_BYTES            16
#define MAX_CONCURRENCY              1024
#define TOKEN_STATE_BYTES            8
#define MOVING_INLINE                2
#define MOVING_ENTRY_BYTES           8
#define MOVING_STAMP_SHIFT           32
#define MOVING_HITS_MAX              INT64_C(4294967295)
#define MOVING_SPAN_BITS             28
#define MOVING_MIN_SHIFT             5
#define MOVING_LINK_BITS             29
#define MOVING_LINK_MASK             536870911
#define MOVING_LAST_SHIFT            29
#define MOVING_TAIL_SHIFT            58
#define MOVING_KEY_BYTES             8
#define MOVING_STATE_BYTES           32
#define CHUNK_ENTRIES                3
#define CHUNK_BYTES                  32
#define NAME_SLOTS                   512
#define NAME_PROBES                  4
#define NAME_MAX_BYTES               48
#define NAME_ENTRY_BYTES             64
#define MOVING_INLINE_SHIFT          60
#define MOVING_RUN_CHUNKS_SHIFT      32
#define LIMITER_RING_BYTES           40
#define LIMITER_RING_WORDS           5
#define GHOST_EPOCH_SHIFT            32
#define GHOST_HITS_MAX               INT64_C(4294967295)
#define COUNT32_BYTES                4
#define COUNT32_MAX                  2147483647
#define LEASE_STATE_BYTES            88
#define CACHE_STATE_BYTES            16
#define DIST_SLOT_BYTES              40
#define DIST_BIN_BYTES               4
#define DIST_BIN_MAX                 INT64_C(4294967295)
#define DIST_BIN_ZERO                0
#define DIST_BIN_UNDER               1
#define DIST_BIN_OVER                2
#define DIST_FIRST_LOG_BIN           3
#define DIST_MAX_BINS                65536
#define SERIES_HDR_BYTES             4096
#define SERIES_ENTRY_BYTES           56
#define SERIES_CELL_BYTES            32
#define SERIES_SHARED                0
#define SERIES_LIFETIME              1
#define SERIES_META                  2
#define SERIES_DROPPED               1
#define SERIES_LOCK_DIR              0
#define SERIES_MAX_KEY               4096
#define SERIES_MAX                   16777216
#define SERIES_INDEX_MIN             64
#define DTYPE_INT64                  0
#define DTYPE_FLOAT64                1
#define MODE_STRIPED                 0
#define MODE_LOCKED                  1
#define KIND_WINDOW                  0
#define KIND_LIMITER                 1
#define CLOCK_KIND_MONOTONIC         0
#define CLOCK_KIND_WALL              1
#define ROLE_PLAIN                   0
#define ROLE_FIXED_STARTS            1
#define ROLE_BREAKER                 2
#define ROLE_SHEDDER                 3
#define ROLE_IN_FLIGHT               4
#define ROLE_ADAPTIVE                5
#define ROLE_HEALTH                  6
#define ROLE_FIXED_WINDOW            7
#define ROLE_SLIDING_COUNTER         8
#define ROLE_DECISIONS               9
#define ROLE_MOVING_LOG              10
#define ROLE_CONCURRENCY             11
#define ROLE_TOKEN_BUCKET            12
#define ROLE_LEASE                   13
#define ROLE_DISTRIBUTION            14
#define ROLE_SERIES                  15
#define ROLE_COUNTER_CACHE           16
#define ON_FULL_RAISE                0
#define ON_FULL_ALLOW                1
#define ON_FULL_DENY                 2
#define MAGIC_OFF                    0
#define HEADER_CRC_OFF               24
#define FIELD_NAMES_OFF              256
#define RING_TABLE_OFF               768
#define ROWS_IN_USE_OFF              1024
#define INDEX_OFF                    1032
#define INDEX_USED_OFF               1040
#define KEYS_OFF                     1048
#define ROWS_TOP_OFF                 1056
#define ROWS_RESERVED_OFF            1064
#define FREE_HEAD_OFF                1072
#define REBUILT_NS_OFF               1080
#define FULL_COUNT_OFF               1088
#define CHUNKS_TOP_OFF               1096
#define CHUNKS_RESERVED_OFF          1104
#define CHUNK_FREE_OFF               1112
#define SKETCH_BINS_OFF              192
#define SKETCH_ERROR_OFF             200
#define SKETCH_LOW_OFF               208
#define SKETCH_HIGH_OFF              216
#define LIVE_GEN_OFF                 1120
#define LIVE_CHANGED_NS_OFF          1128
#define LIVE_LIMITS_OFF              1136
#define LOCK_MUTEX_OFF               0
#define LOCK_INTENT_OFF              56
#define LOCK_INTENT                  7
#define STRIPE_OWNER_OFF             0
#define STRIPE_OWNER                 0
#define STRIPE_OWNER_START_OFF       8
#define STRIPE_OWNER_START           1
#define STRIPE_OWNER_PID_OFF         16
#define STRIPE_OWNER_PID             2
#define STRIPE_CLAIMED_NS_OFF        24
#define STRIPE_CLAIMED_NS            3
#define STRIPE_CLAIMS_OFF            32
#define STRIPE_CLAIMS                4
#define STRIPE_MUTEX_OFF             64
#define INDEX_ENTRY_GEN_OFF          0
#define INDEX_ENTRY_GEN              0
#define INDEX_ENTRY_PLACE_OFF        8
#define INDEX_ENTRY_PLACE            1
#define KEY_ROW_GEN_OFF              0
#define KEY_ROW_GEN                  0
#define KEY_ROW_LAST_NS_OFF          8
#define KEY_ROW_LAST_NS              1
#define KEY_ROW_IDENT_OFF            16
#define KEY_ROW_IDENT                2
#define KEY_ROW_KEY_OFF              24
#define LIMITER_RING_HEAD_OFF        0
#define LIMITER_RING_HEAD            0
#define LIMITER_RING_TOTAL_OFF       8
#define LIMITER_RING_TOTAL           1
#define LIMITER_RING_ZEROED_OFF      16
#define LIMITER_RING_ZEROED          2
#define LIMITER_RING_TAIL_OFF        24
#define LIMITER_RING_TAIL            3
#define LIMITER_RING_GHOST_OFF       32
#define LIMITER_RING_GHOST           4
#define RING_ENTRY_BUCKET_NS_OFF     0
#define RING_ENTRY_BUCKET_NS         0
#define RING_ENTRY_N_BUCKETS_OFF     8
#define RING_ENTRY_N_BUCKETS         1
#define RING_ENTRY_FLAGS_OFF         12
#define RING_ENTRY_LIMIT_OFF         16
#define RING_ENTRY_LIMIT             2
#define FIXED_STATE_START_OFF        0
#define FIXED_STATE_START            0
#define FIXED_STATE_COUNT_OFF        8
#define FIXED_STATE_COUNT            1
#define SLIDING_STATE_WINDOW_OFF     0
#define SLIDING_STATE_WINDOW         0
#define SLIDING_STATE_CURRENT_OFF    8
#define SLIDING_STATE_CURRENT        1
#define SLIDING_STATE_PREVIOUS_OFF   16
#define SLIDING_STATE_PREVIOUS       2
#define CONC_STATE_TOP_OFF           0
#define CONC_STATE_TOP               0
#define CONC_HOLDER_STRIPE_OFF       0
#define CONC_HOLDER_STRIPE           0
#define CONC_HOLDER_CLAIM_OFF        8
#define CONC_HOLDER_CLAIM            1
#define TOKEN_STATE_TAT_OFF          0
#define TOKEN_STATE_TAT              0
#define MOVING_STATE_CHAIN_OFF       0
#define MOVING_STATE_CHAIN           0
#define MOVING_STATE_RUN_OFF         8
#define MOVING_STATE_RUN             1
#define MOVING_STATE_ENTRIES_OFF     16
#define NAME_ENTRY_GEN_OFF           0
#define NAME_ENTRY_ROW_OFF           8
#define NAME_ENTRY_LEN_OFF           12
#define NAME_ENTRY_NAME_OFF          16
#define CHUNK_NEXT_OFF               0
#define CHUNK_OWNER_OFF              4
#define CHUNK_ENTRIES_OFF            8
#define LEASE_STATE_LEASE_OFF        0
#define LEASE_STATE_LEASE            0
#define LEASE_STATE_GRANTED_OFF      8
#define LEASE_STATE_GRANTED          1
#define LEASE_STATE_SPENT_OFF        16
#define LEASE_STATE_SPENT            2
#define LEASE_STATE_DEADLINE_NS_OFF  24
#define LEASE_STATE_DEADLINE_NS      3
#define LEASE_STATE_START_NS_OFF     32
#define LEASE_STATE_START_NS         4
#define LEASE_STATE_GRANT_US_OFF     40
#define LEASE_STATE_GRANT_US         5
#define LEASE_STATE_LAST_NS_OFF      48
#define LEASE_STATE_LAST_NS          6
#define LEASE_STATE_DENY_NS_OFF      56
#define LEASE_STATE_DENY_NS          7
#define LEASE_STATE_SERVED_OFF       64
#define LEASE_STATE_SERVED           8
#define LEASE_STATE_LEASES_OFF       72
#define LEASE_STATE_LEASES           9
#define LEASE_STATE_REFUSALS_OFF     80
#define LEASE_STATE_REFUSALS         10
#define DIST_SLOT_EPOCH_OFF          0
#define DIST_SLOT_EPOCH              0
#define DIST_SLOT_COUNT_OFF          8
#define DIST_SLOT_COUNT              1
#define DIST_SLOT_SUM_OFF            16
#define DIST_SLOT_SUM                2
#define DIST_SLOT_MIN_OFF            24
#define DIST_SLOT_MIN                3
#define DIST_SLOT_MAX_OFF            32
#define DIST_SLOT_MAX                4
#define CACHE_STATE_EXPIRES_NS_OFF   0
#define CACHE_STATE_EXPIRES_NS       0
#define CACHE_STATE_VALUE_OFF        8
#define CACHE_STATE_VALUE            1
#define SERIES_HDR_MAGIC_OFF         0
#define SERIES_HDR_VERSION_OFF       8
#define SERIES_HDR_VERSION           1
#define SERIES_HDR_HEADER_BYTES_OFF  12
#define SERIES_HDR_TOTAL_BYTES_OFF   16
#define SERIES_HDR_TOTAL_BYTES       2
#define SERIES_HDR_HASH_KEY_OFF      152
#define SERIES_HDR_ROLE_OFF          168
#define SERIES_HDR_ROLE              21
#define SERIES_HDR_MAX_SERIES_OFF    192
#define SERIES_HDR_MAX_SERIES        24
#define SERIES_HDR_INDEX_SLOTS_OFF   200
#define SERIES_HDR_INDEX_SLOTS       25
#define SERIES_HDR_N_SLOTS_OFF       208
#define SERIES_HDR_N_SLOTS           26
#define SERIES_HDR_LOCKS_AT_OFF      216
#define SERIES_HDR_LOCKS_AT          27
#define SERIES_HDR_SLOTS_AT_OFF      224
#define SERIES_HDR_SLOTS_AT          28
#define SERIES_HDR_INDEX_AT_OFF      232
#define SERIES_HDR_INDEX_AT          29
#define SERIES_HDR_ENTRIES_AT_OFF    240
#define SERIES_HDR_ENTRIES_AT        30
#define SERIES_HDR_ENTRIES_BYTES_OFF 248
#define SERIES_HDR_ENTRIES_BYTES     31
#define SERIES_HDR_CELLS_AT_OFF      256
#define SERIES_HDR_CELLS_AT          32
#define SERIES_HDR_ENTRY_TOP_OFF     1024
#define SERIES_HDR_ENTRY_TOP         128
#define SERIES_HDR_CELLS_TOP_OFF     1032
#define SERIES_HDR_CELLS_TOP         129
#define SERIES_HDR_LIFETIMES_OFF     1040
#define SERIES_HDR_LIFETIMES         130
#define SERIES_HDR_FULL_COUNT_OFF    1048
#define SERIES_HDR_FULL_COUNT        131
#define SERIES_HDR_ENTRIES_OFF       1056
#define SERIES_HDR_ENTRIES           132
#define SERIES_HDR_INDEX_LEVEL_OFF   1064
#define SERIES_HDR_INDEX_LEVEL       133
#define SERIES_ENTRY_KEY_LEN_OFF     0
#define SERIES_ENTRY_KEY_LEN         0
#define SERIES_ENTRY_KIND_OFF        4
#define SERIES_ENTRY_HASH_OFF        8
#define SERIES_ENTRY_HASH            1
#define SERIES_ENTRY_CELL_OFF        16
#define SERIES_ENTRY_CELL            2
#define SERIES_ENTRY_SLOT_OFF        24
#define SERIES_ENTRY_SLOT            3
#define SERIES_ENTRY_LIFETIME_OFF    32
#define SERIES_ENTRY_LIFETIME        4
#define SERIES_ENTRY_PID_OFF         40
#define SERIES_ENTRY_PID             5
#define SERIES_ENTRY_FLAGS_OFF       48
#define SERIES_ENTRY_FLAGS           6
#define SERIES_CELL_VALUE_OFF        0
#define SERIES_CELL_VALUE            0
#define SERIES_CELL_STAMP_OFF        8
#define SERIES_CELL_STAMP            1
#define SERIES_CELL_SEQ_OFF          16
#define SERIES_CELL_SEQ              2
#define SERIES_CELL_ENTRY_OFF        24
#define SERIES_CELL_ENTRY            3

/* Every constant above, for _core.LAYOUT: X(name) for each. */
#define SHMWIN_LAYOUT_NAMES(X) \
    X(FORMAT_VERSION) \
    X(WORD_BYTES) \
    X(PAGE_BYTES) \
    X(HEADER_BYTES) \
    X(CRC_START) \
    X(CRC_END) \
    X(MAX_FIELDS) \
    X(FIELD_NAME_BYTES) \
    X(MAX_RINGS) \
    X(MAX_BUCKETS) \
    X(MAX_LOG_ENTRIES) \
    X(MAX_STRIPES) \
    X(MAX_CAPACITY) \
    X(MAX_KEY_LOCKS) \
    X(INDEX_MIN_SLOTS) \
    X(MAX_PROBES) \
    X(MAX_STORED_KEY) \
    X(KEY_DIGEST_BYTES) \
    X(KEY_LONG_PREFIX) \
    X(KEY_HASH_BITS) \
    X(ENTRY_ROW_BITS) \
    X(KEY_HASH_MASK) \
    X(ENTRY_ROW_MASK) \
    X(IDENT_LEN_SHIFT) \
    X(IDENT_FLAGS_SHIFT) \
    X(MAX_GEN) \
    X(MAX_NOW_NS) \
    X(MAX_SPAN_NS) \
    X(EMPTY_EPOCH) \
    X(FULL_DENY_COUNT) \
    X(RING_LOG) \
    X(LIVE_MOVED) \
    X(KEY_FLAG_STR) \
    X(KEY_FLAG_DIGEST) \
    X(LOCK_STRIPE_TABLE) \
    X(LOCK_KEY_TABLE) \
    X(LOCK_SHARED_ROW) \
    X(LOCK_CHUNKS) \
    X(FIRST_KEY_LOCK) \
    X(SLOT_EPOCH) \
    X(SLOT_VALUES) \
    X(WINDOW_HEAD_SLOTS) \
    X(LIMITER_HEAD_SLOTS) \
    X(RING_HEAD_SLOT) \
    X(RING_TAIL_SLOT) \
    X(LOG_TIME) \
    X(LOG_HITS) \
    X(LOG_HDR_POS) \
    X(LOG_HDR_TOTAL) \
    X(LOG_HDR_DEAD_TIME) \
    X(LOG_HDR_DEAD_HITS) \
    X(LOG_HDR_WORDS) \
    X(RING_ENTRY_BYTES) \
    X(LOCK_BYTES) \
    X(STRIPE_ENTRY_BYTES) \
    X(KEY_ENTRY_BYTES) \
    X(INDEX_ENTRY_WORDS) \
    X(KEY_HEADER_BYTES) \
    X(FIXED_HEADER_END) \
    X(FIXED_STATE_BYTES) \
    X(SLIDING_STATE_BYTES) \
    X(CONC_STATE_BYTES) \
    X(CONC_HOLDER_BYTES) \
    X(MAX_CONCURRENCY) \
    X(TOKEN_STATE_BYTES) \
    X(MOVING_INLINE) \
    X(MOVING_ENTRY_BYTES) \
    X(MOVING_STAMP_SHIFT) \
    X(MOVING_HITS_MAX) \
    X(MOVING_SPAN_BITS) \
    X(MOVING_MIN_SHIFT) \
    X(MOVING_LINK_BITS) \
    X(MOVING_LINK_MASK) \
    X(MOVING_LAST_SHIFT) \
    X(MOVING_TAIL_SHIFT) \
    X(MOVING_KEY_BYTES) \
    X(MOVING_STATE_BYTES) \
    X(CHUNK_ENTRIES) \
    X(CHUNK_BYTES) \
    X(NAME_SLOTS) \
    X(NAME_PROBES) \
    X(NAME_MAX_BYTES) \
    X(NAME_ENTRY_BYTES) \
    X(MOVING_INLINE_SHIFT) \
    X(MOVING_RUN_CHUNKS_SHIFT) \
    X(LIMITER_RING_BYTES) \
    X(LIMITER_RING_WORDS) \
    X(GHOST_EPOCH_SHIFT) \
    X(GHOST_HITS_MAX) \
    X(COUNT32_BYTES) \
    X(COUNT32_MAX) \
    X(LEASE_STATE_BYTES) \
    X(CACHE_STATE_BYTES) \
    X(DIST_SLOT_BYTES) \
    X(DIST_BIN_BYTES) \
    X(DIST_BIN_MAX) \
    X(DIST_BIN_ZERO) \
    X(DIST_BIN_UNDER) \
    X(DIST_BIN_OVER) \
    X(DIST_FIRST_LOG_BIN) \
    X(DIST_MAX_BINS) \
    X(SERIES_HDR_BYTES) \
    X(SERIES_ENTRY_BYTES) \
    X(SERIES_CELL_BYTES) \
    X(SERIES_SHARED) \
    X(SERIES_LIFETIME) \
    X(SERIES_META) \
    X(SERIES_DROPPED) \
    X(SERIES_LOCK_DIR) \
    X(SERIES_MAX_KEY) \
    X(SERIES_MAX) \
    X(SERIES_INDEX_MIN) \
    X(DTYPE_INT64) \
    X(DTYPE_FLOAT64) \
    X(MODE_STRIPED) \
    X(MODE_LOCKED) \
    X(KIND_WINDOW) \
    X(KIND_LIMITER) \
    X(CLOCK_KIND_MONOTONIC) \
    X(CLOCK_KIND_WALL) \
    X(ROLE_PLAIN) \
    X(ROLE_FIXED_STARTS) \
    X(ROLE_BREAKER) \
    X(ROLE_SHEDDER) \
    X(ROLE_IN_FLIGHT) \
    X(ROLE_ADAPTIVE) \
    X(ROLE_HEALTH) \
    X(ROLE_FIXED_WINDOW) \
    X(ROLE_SLIDING_COUNTER) \
    X(ROLE_DECISIONS) \
    X(ROLE_MOVING_LOG) \
    X(ROLE_CONCURRENCY) \
    X(ROLE_TOKEN_BUCKET) \
    X(ROLE_LEASE) \
    X(ROLE_DISTRIBUTION) \
    X(ROLE_SERIES) \
    X(ROLE_COUNTER_CACHE) \
    X(ON_FULL_RAISE) \
    X(ON_FULL_ALLOW) \
    X(ON_FULL_DENY) \
    X(MAGIC_OFF) \
    X(HEADER_CRC_OFF) \
    X(FIELD_NAMES_OFF) \
    X(RING_TABLE_OFF) \
    X(ROWS_IN_USE_OFF) \
    X(INDEX_OFF) \
    X(INDEX_USED_OFF) \
    X(KEYS_OFF) \
    X(ROWS_TOP_OFF) \
    X(ROWS_RESERVED_OFF) \
    X(FREE_HEAD_OFF) \
    X(REBUILT_NS_OFF) \
    X(FULL_COUNT_OFF) \
    X(CHUNKS_TOP_OFF) \
    X(CHUNKS_RESERVED_OFF) \
    X(CHUNK_FREE_OFF) \
    X(SKETCH_BINS_OFF) \
    X(SKETCH_ERROR_OFF) \
    X(SKETCH_LOW_OFF) \
    X(SKETCH_HIGH_OFF) \
    X(LIVE_GEN_OFF) \
    X(LIVE_CHANGED_NS_OFF) \
    X(LIVE_LIMITS_OFF) \
    X(LOCK_MUTEX_OFF) \
    X(LOCK_INTENT_OFF) \
    X(LOCK_INTENT) \
    X(STRIPE_OWNER_OFF) \
    X(STRIPE_OWNER) \
    X(STRIPE_OWNER_START_OFF) \
    X(STRIPE_OWNER_START) \
    X(STRIPE_OWNER_PID_OFF) \
    X(STRIPE_OWNER_PID) \
    X(STRIPE_CLAIMED_NS_OFF) \
    X(STRIPE_CLAIMED_NS) \
    X(STRIPE_CLAIMS_OFF) \
    X(STRIPE_CLAIMS) \
    X(STRIPE_MUTEX_OFF) \
    X(INDEX_ENTRY_GEN_OFF) \
    X(INDEX_ENTRY_GEN) \
    X(INDEX_ENTRY_PLACE_OFF) \
    X(INDEX_ENTRY_PLACE) \
    X(KEY_ROW_GEN_OFF) \
    X(KEY_ROW_GEN) \
    X(KEY_ROW_LAST_NS_OFF) \
    X(KEY_ROW_LAST_NS) \
    X(KEY_ROW_IDENT_OFF) \
    X(KEY_ROW_IDENT) \
    X(KEY_ROW_KEY_OFF) \
    X(LIMITER_RING_HEAD_OFF) \
    X(LIMITER_RING_HEAD) \
    X(LIMITER_RING_TOTAL_OFF) \
    X(LIMITER_RING_TOTAL) \
    X(LIMITER_RING_ZEROED_OFF) \
    X(LIMITER_RING_ZEROED) \
    X(LIMITER_RING_TAIL_OFF) \
    X(LIMITER_RING_TAIL) \
    X(LIMITER_RING_GHOST_OFF) \
    X(LIMITER_RING_GHOST) \
    X(RING_ENTRY_BUCKET_NS_OFF) \
    X(RING_ENTRY_BUCKET_NS) \
    X(RING_ENTRY_N_BUCKETS_OFF) \
    X(RING_ENTRY_N_BUCKETS) \
    X(RING_ENTRY_FLAGS_OFF) \
    X(RING_ENTRY_LIMIT_OFF) \
    X(RING_ENTRY_LIMIT) \
    X(FIXED_STATE_START_OFF) \
    X(FIXED_STATE_START) \
    X(FIXED_STATE_COUNT_OFF) \
    X(FIXED_STATE_COUNT) \
    X(SLIDING_STATE_WINDOW_OFF) \
    X(SLIDING_STATE_WINDOW) \
    X(SLIDING_STATE_CURRENT_OFF) \
    X(SLIDING_STATE_CURRENT) \
    X(SLIDING_STATE_PREVIOUS_OFF) \
    X(SLIDING_STATE_PREVIOUS) \
    X(CONC_STATE_TOP_OFF) \
    X(CONC_STATE_TOP) \
    X(CONC_HOLDER_STRIPE_OFF) \
    X(CONC_HOLDER_STRIPE) \
    X(CONC_HOLDER_CLAIM_OFF) \
    X(CONC_HOLDER_CLAIM) \
    X(TOKEN_STATE_TAT_OFF) \
    X(TOKEN_STATE_TAT) \
    X(MOVING_STATE_CHAIN_OFF) \
    X(MOVING_STATE_CHAIN) \
    X(MOVING_STATE_RUN_OFF) \
    X(MOVING_STATE_RUN) \
    X(MOVING_STATE_ENTRIES_OFF) \
    X(NAME_ENTRY_GEN_OFF) \
    X(NAME_ENTRY_ROW_OFF) \
    X(NAME_ENTRY_LEN_OFF) \
    X(NAME_ENTRY_NAME_OFF) \
    X(CHUNK_NEXT_OFF) \
    X(CHUNK_OWNER_OFF) \
    X(CHUNK_ENTRIES_OFF) \
    X(LEASE_STATE_LEASE_OFF) \
    X(LEASE_STATE_LEASE) \
    X(LEASE_STATE_GRANTED_OFF) \
    X(LEASE_STATE_GRANTED) \
    X(LEASE_STATE_SPENT_OFF) \
    X(LEASE_STATE_SPENT) \
    X(LEASE_STATE_DEADLINE_NS_OFF) \
    X(LEASE_STATE_DEADLINE_NS) \
    X(LEASE_STATE_START_NS_OFF) \
    X(LEASE_STATE_START_NS) \
    X(LEASE_STATE_GRANT_US_OFF) \
    X(LEASE_STATE_GRANT_US) \
    X(LEASE_STATE_LAST_NS_OFF) \
    X(LEASE_STATE_LAST_NS) \
    X(LEASE_STATE_DENY_NS_OFF) \
    X(LEASE_STATE_DENY_NS) \
    X(LEASE_STATE_SERVED_OFF) \
    X(LEASE_STATE_SERVED) \
    X(LEASE_STATE_LEASES_OFF) \
    X(LEASE_STATE_LEASES) \
    X(LEASE_STATE_REFUSALS_OFF) \
    X(LEASE_STATE_REFUSALS) \
    X(DIST_SLOT_EPOCH_OFF) \
    X(DIST_SLOT_EPOCH) \
    X(DIST_SLOT_COUNT_OFF) \
    X(DIST_SLOT_COUNT) \
    X(DIST_SLOT_SUM_OFF) \
    X(DIST_SLOT_SUM) \
    X(DIST_SLOT_MIN_OFF) \
    X(DIST_SLOT_MIN) \
    X(DIST_SLOT_MAX_OFF) \
    X(DIST_SLOT_MAX) \
    X(CACHE_STATE_EXPIRES_NS_OFF) \
    X(CACHE_STATE_EXPIRES_NS) \
    X(CACHE_STATE_VALUE_OFF) \
    X(CACHE_STATE_VALUE) \
    X(SERIES_HDR_MAGIC_OFF) \
    X(SERIES_HDR_VERSION_OFF) \
    X(SERIES_HDR_VERSION) \
    X(SERIES_HDR_HEADER_BYTES_OFF) \
    X(SERIES_HDR_TOTAL_BYTES_OFF) \
    X(SERIES_HDR_TOTAL_BYTES) \
    X(SERIES_HDR_HASH_KEY_OFF) \
    X(SERIES_HDR_ROLE_OFF) \
    X(SERIES_HDR_ROLE) \
    X(SERIES_HDR_MAX_SERIES_OFF) \
    X(SERIES_HDR_MAX_SERIES) \
    X(SERIES_HDR_INDEX_SLOTS_OFF) \
    X(SERIES_HDR_INDEX_SLOTS) \
    X(SERIES_HDR_N_SLOTS_OFF) \
    X(SERIES_HDR_N_SLOTS) \
    X(SERIES_HDR_LOCKS_AT_OFF) \
    X(SERIES_HDR_LOCKS_AT) \
    X(SERIES_HDR_SLOTS_AT_OFF) \
    X(SERIES_HDR_SLOTS_AT) \
    X(SERIES_HDR_INDEX_AT_OFF) \
    X(SERIES_HDR_INDEX_AT) \
    X(SERIES_HDR_ENTRIES_AT_OFF) \
    X(SERIES_HDR_ENTRIES_AT) \
    X(SERIES_HDR_ENTRIES_BYTES_OFF) \
    X(SERIES_HDR_ENTRIES_BYTES) \
    X(SERIES_HDR_CELLS_AT_OFF) \
    X(SERIES_HDR_CELLS_AT) \
    X(SERIES_HDR_ENTRY_TOP_OFF) \
    X(SERIES_HDR_ENTRY_TOP) \
    X(SERIES_HDR_CELLS_TOP_OFF) \
    X(SERIES_HDR_CELLS_TOP) \
    X(SERIES_HDR_LIFETIMES_OFF) \
    X(SERIES_HDR_LIFETIMES) \
    X(SERIES_HDR_FULL_COUNT_OFF) \
    X(SERIES_HDR_FULL_COUNT) \
    X(SERIES_HDR_ENTRIES_OFF) \
    X(SERIES_HDR_ENTRIES) \
    X(SERIES_HDR_INDEX_LEVEL_OFF) \
    X(SERIES_HDR_INDEX_LEVEL) \
    X(SERIES_ENTRY_KEY_LEN_OFF) \
    X(SERIES_ENTRY_KEY_LEN) \
    X(SERIES_ENTRY_KIND_OFF) \
    X(SERIES_ENTRY_HASH_OFF) \
    X(SERIES_ENTRY_HASH) \
    X(SERIES_ENTRY_CELL_OFF) \
    X(SERIES_ENTRY_CELL) \
    X(SERIES_ENTRY_SLOT_OFF) \
    X(SERIES_ENTRY_SLOT) \
    X(SERIES_ENTRY_LIFETIME_OFF) \
    X(SERIES_ENTRY_LIFETIME) \
    X(SERIES_ENTRY_PID_OFF) \
    X(SERIES_ENTRY_PID) \
    X(SERIES_ENTRY_FLAGS_OFF) \
    X(SERIES_ENTRY_FLAGS) \
    X(SERIES_CELL_VALUE_OFF) \
    X(SERIES_CELL_VALUE) \
    X(SERIES_CELL_STAMP_OFF) \
    X(SERIES_CELL_STAMP) \
    X(SERIES_CELL_SEQ_OFF) \
    X(SERIES_CELL_SEQ) \
    X(SERIES_CELL_ENTRY_OFF) \
    X(SERIES_CELL_ENTRY) \
    /* end */

typedef struct {  /* generated: offsets asserted below */
    int64_t bucket_ns;
    uint32_t n_buckets;
    uint32_t flags;
    int64_t limit;
} ShmwinRingEntry;
_Static_assert(offsetof(ShmwinRingEntry, bucket_ns) == 0, "ShmwinRingEntry.bucket_ns");
_Static_assert(offsetof(ShmwinRingEntry, n_buckets) == 8, "ShmwinRingEntry.n_buckets");
_Static_assert(offsetof(ShmwinRingEntry, flags) == 12, "ShmwinRingEntry.flags");
_Static_assert(offsetof(ShmwinRingEntry, limit) == 16, "ShmwinRingEntry.limit");
_Static_assert(sizeof(ShmwinRingEntry) == 24, "ShmwinRingEntry: its size");

typedef struct {  /* generated: offsets asserted below */
    uint8_t magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t total_bytes;
    uint32_t header_crc;
    uint32_t reserved;
    uint32_t n_rings;
    uint32_t kind;
    uint32_t n_fields;
    uint32_t dtype;
    uint32_t mode;
    uint32_t n_stripes;
    uint32_t n_locks;
    uint32_t capacity;
    uint32_t key_slots;
    uint32_t clock;
    int64_t creator_pid;
    int64_t created_real_ns;
    int64_t created_mono_ns;
    uint8_t boot_id[16];
    uint64_t locks_off;
    uint64_t stripes_off;
    uint64_t keys_off;
    uint64_t rows_off;
    uint64_t row_bytes;
    uint8_t hash_key[16];
    uint32_t role;
    uint8_t pad0[4];
    uint64_t chunks_off;
    uint64_t n_chunks;
    uint32_t sketch_bins;
    uint8_t pad1[4];
    uint64_t sketch_error;
    uint64_t sketch_low;
    uint64_t sketch_high;
    uint8_t pad2[32];
    uint8_t field_names[512];
    ShmwinRingEntry ring_table[8];
    uint8_t pad3[64];
    int64_t rows_in_use;
    uint64_t index;
    int64_t index_used;
    int64_t keys;
    uint64_t rows_top;
    uint64_t rows_reserved;
    int64_t free_head;
    int64_t rebuilt_ns;
    int64_t full_count;
    uint64_t chunks_top;
    uint64_t chunks_reserved;
    int64_t chunk_free;
    int64_t live_gen;
    int64_t live_changed_ns;
    uint8_t live_limits[128];
} ShmwinHeader;
_Static_assert(offsetof(ShmwinHeader, magic) == 0, "ShmwinHeader.magic");
_Static_assert(offsetof(ShmwinHeader, version) == 8, "ShmwinHeader.version");
_Static_assert(offsetof(ShmwinHeader, header_bytes) == 12, "ShmwinHeader.header_bytes");
_Static_assert(offsetof(ShmwinHeader, total_bytes) == 16, "ShmwinHeader.total_bytes");
_Static_assert(offsetof(ShmwinHeader, header_crc) == 24, "ShmwinHeader.header_crc");
_Static_assert(offsetof(ShmwinHeader, reserved) == 28, "ShmwinHeader.reserved");
_Static_assert(offsetof(ShmwinHeader, n_rings) == 32, "ShmwinHeader.n_rings");
_Static_assert(offsetof(ShmwinHeader, kind) == 36, "ShmwinHeader.kind");
_Static_assert(offsetof(ShmwinHeader, n_fields) == 40, "ShmwinHeader.n_fields");
_Static_assert(offsetof(ShmwinHeader, dtype) == 44, "ShmwinHeader.dtype");
_Static_assert(offsetof(ShmwinHeader, mode) == 48, "ShmwinHeader.mode");
_Static_assert(offsetof(ShmwinHeader, n_stripes) == 52, "ShmwinHeader.n_stripes");
_Static_assert(offsetof(ShmwinHeader, n_locks) == 56, "ShmwinHeader.n_locks");
_Static_assert(offsetof(ShmwinHeader, capacity) == 60, "ShmwinHeader.capacity");
_Static_assert(offsetof(ShmwinHeader, key_slots) == 64, "ShmwinHeader.key_slots");
_Static_assert(offsetof(ShmwinHeader, clock) == 68, "ShmwinHeader.clock");
_Static_assert(offsetof(ShmwinHeader, creator_pid) == 72, "ShmwinHeader.creator_pid");
_Static_assert(offsetof(ShmwinHeader, created_real_ns) == 80, "ShmwinHeader.created_real_ns");
_Static_assert(offsetof(ShmwinHeader, created_mono_ns) == 88, "ShmwinHeader.created_mono_ns");
_Static_assert(offsetof(ShmwinHeader, boot_id) == 96, "ShmwinHeader.boot_id");
_Static_assert(offsetof(ShmwinHeader, locks_off) == 112, "ShmwinHeader.locks_off");
_Static_assert(offsetof(ShmwinHeader, stripes_off) == 120, "ShmwinHeader.stripes_off");
_Static_assert(offsetof(ShmwinHeader, keys_off) == 128, "ShmwinHeader.keys_off");
_Static_assert(offsetof(ShmwinHeader, rows_off) == 136, "ShmwinHeader.rows_off");
_Static_assert(offsetof(ShmwinHeader, row_bytes) == 144, "ShmwinHeader.row_bytes");
_Static_assert(offsetof(ShmwinHeader, hash_key) == 152, "ShmwinHeader.hash_key");
_Static_assert(offsetof(ShmwinHeader, role) == 168, "ShmwinHeader.role");
_Static_assert(offsetof(ShmwinHeader, chunks_off) == 176, "ShmwinHeader.chunks_off");
_Static_assert(offsetof(ShmwinHeader, n_chunks) == 184, "ShmwinHeader.n_chunks");
_Static_assert(offsetof(ShmwinHeader, sketch_bins) == 192, "ShmwinHeader.sketch_bins");
_Static_assert(offsetof(ShmwinHeader, sketch_error) == 200, "ShmwinHeader.sketch_error");
_Static_assert(offsetof(ShmwinHeader, sketch_low) == 208, "ShmwinHeader.sketch_low");
_Static_assert(offsetof(ShmwinHeader, sketch_high) == 216, "ShmwinHeader.sketch_high");
_Static_assert(offsetof(ShmwinHeader, field_names) == 256, "ShmwinHeader.field_names");
_Static_assert(offsetof(ShmwinHeader, ring_table) == 768, "ShmwinHeader.ring_table");
_Static_assert(offsetof(ShmwinHeader, rows_in_use) == 1024, "ShmwinHeader.rows_in_use");
_Static_assert(offsetof(ShmwinHeader, index) == 1032, "ShmwinHeader.index");
_Static_assert(offsetof(ShmwinHeader, index_used) == 1040, "ShmwinHeader.index_used");
_Static_assert(offsetof(ShmwinHeader, keys) == 1048, "ShmwinHeader.keys");
_Static_assert(offsetof(ShmwinHeader, rows_top) == 1056, "ShmwinHeader.rows_top");
_Static_assert(offsetof(ShmwinHeader, rows_reserved) == 1064, "ShmwinHeader.rows_reserved");
_Static_assert(offsetof(ShmwinHeader, free_head) == 1072, "ShmwinHeader.free_head");
_Static_assert(offsetof(ShmwinHeader, rebuilt_ns) == 1080, "ShmwinHeader.rebuilt_ns");
_Static_assert(offsetof(ShmwinHeader, full_count) == 1088, "ShmwinHeader.full_count");
_Static_assert(offsetof(ShmwinHeader, chunks_top) == 1096, "ShmwinHeader.chunks_top");
_Static_assert(offsetof(ShmwinHeader, chunks_reserved) == 1104, "ShmwinHeader.chunks_reserved");
_Static_assert(offsetof(ShmwinHeader, chunk_free) == 1112, "ShmwinHeader.chunk_free");
_Static_assert(offsetof(ShmwinHeader, live_gen) == 1120, "ShmwinHeader.live_gen");
_Static_assert(offsetof(ShmwinHeader, live_changed_ns) == 1128, "ShmwinHeader.live_changed_ns");
_Static_assert(offsetof(ShmwinHeader, live_limits) == 1136, "ShmwinHeader.live_limits");

/* Records read word by word: each field fits before the next, each mutex in its room. */
_Static_assert(LOCK_MUTEX_OFF + sizeof(pthread_mutex_t) <= LOCK_INTENT_OFF, "LOCK.mutex");
_Static_assert(LOCK_INTENT_OFF + 8 <= LOCK_BYTES, "LOCK.intent");
_Static_assert(STRIPE_OWNER_OFF + 8 <= STRIPE_OWNER_START_OFF, "STRIPE.owner");
_Static_assert(STRIPE_OWNER_START_OFF + 8 <= STRIPE_OWNER_PID_OFF, "STRIPE.owner_start");
_Static_assert(STRIPE_OWNER_PID_OFF + 8 <= STRIPE_CLAIMED_NS_OFF, "STRIPE.owner_pid");
_Static_assert(STRIPE_CLAIMED_NS_OFF + 8 <= STRIPE_CLAIMS_OFF, "STRIPE.claimed_ns");
_Static_assert(STRIPE_CLAIMS_OFF + 8 <= STRIPE_MUTEX_OFF, "STRIPE.claims");
_Static_assert(STRIPE_MUTEX_OFF + sizeof(pthread_mutex_t) <= STRIPE_ENTRY_BYTES, "STRIPE.mutex");
_Static_assert(INDEX_ENTRY_GEN_OFF + 8 <= INDEX_ENTRY_PLACE_OFF, "INDEX_ENTRY.gen");
_Static_assert(INDEX_ENTRY_PLACE_OFF + 8 <= KEY_ENTRY_BYTES, "INDEX_ENTRY.place");
_Static_assert(KEY_ROW_GEN_OFF + 8 <= KEY_ROW_LAST_NS_OFF, "KEY_ROW.gen");
_Static_assert(KEY_ROW_LAST_NS_OFF + 8 <= KEY_ROW_IDENT_OFF, "KEY_ROW.last_ns");
_Static_assert(KEY_ROW_IDENT_OFF + 8 <= KEY_ROW_KEY_OFF, "KEY_ROW.ident");
_Static_assert(KEY_ROW_KEY_OFF + 32 <= KEY_HEADER_BYTES, "KEY_ROW.key");
_Static_assert(LIMITER_RING_HEAD_OFF + 8 <= LIMITER_RING_TOTAL_OFF, "LIMITER_RING.head");
_Static_assert(LIMITER_RING_TOTAL_OFF + 8 <= LIMITER_RING_ZEROED_OFF, "LIMITER_RING.total");
_Static_assert(LIMITER_RING_ZEROED_OFF + 8 <= LIMITER_RING_TAIL_OFF, "LIMITER_RING.zeroed");
_Static_assert(LIMITER_RING_TAIL_OFF + 8 <= LIMITER_RING_GHOST_OFF, "LIMITER_RING.tail");
_Static_assert(LIMITER_RING_GHOST_OFF + 8 <= LIMITER_RING_BYTES, "LIMITER_RING.ghost");
_Static_assert(RING_ENTRY_BUCKET_NS_OFF + 8 <= RING_ENTRY_N_BUCKETS_OFF, "RING_ENTRY.bucket_ns");
_Static_assert(RING_ENTRY_N_BUCKETS_OFF + 4 <= RING_ENTRY_FLAGS_OFF, "RING_ENTRY.n_buckets");
_Static_assert(RING_ENTRY_FLAGS_OFF + 4 <= RING_ENTRY_LIMIT_OFF, "RING_ENTRY.flags");
_Static_assert(RING_ENTRY_LIMIT_OFF + 8 <= RING_ENTRY_BYTES, "RING_ENTRY.limit");
_Static_assert(FIXED_STATE_START_OFF + 8 <= FIXED_STATE_COUNT_OFF, "FIXED_STATE.start");
_Static_assert(FIXED_STATE_COUNT_OFF + 8 <= FIXED_STATE_BYTES, "FIXED_STATE.count");
_Static_assert(SLIDING_STATE_WINDOW_OFF + 8 <= SLIDING_STATE_CURRENT_OFF, "SLIDING_STATE.window");
_Static_assert(SLIDING_STATE_CURRENT_OFF + 8 <= SLIDING_STATE_PREVIOUS_OFF, "SLIDING_STATE.current");
_Static_assert(SLIDING_STATE_PREVIOUS_OFF + 8 <= SLIDING_STATE_BYTES, "SLIDING_STATE.previous");
_Static_assert(CONC_STATE_TOP_OFF + 8 <= CONC_STATE_BYTES, "CONC_STATE.top");
_Static_assert(CONC_HOLDER_STRIPE_OFF + 8 <= CONC_HOLDER_CLAIM_OFF, "CONC_HOLDER.stripe");
_Static_assert(CONC_HOLDER_CLAIM_OFF + 8 <= CONC_HOLDER_BYTES, "CONC_HOLDER.claim");
_Static_assert(TOKEN_STATE_TAT_OFF + 8 <= TOKEN_STATE_BYTES, "TOKEN_STATE.tat");
_Static_assert(MOVING_STATE_CHAIN_OFF + 8 <= MOVING_STATE_RUN_OFF, "MOVING_STATE.chain");
_Static_assert(MOVING_STATE_RUN_OFF + 8 <= MOVING_STATE_ENTRIES_OFF, "MOVING_STATE.run");
_Static_assert(MOVING_STATE_ENTRIES_OFF + 16 <= MOVING_STATE_BYTES, "MOVING_STATE.entries");
_Static_assert(NAME_ENTRY_GEN_OFF + 8 <= NAME_ENTRY_ROW_OFF, "NAME_ENTRY.gen");
_Static_assert(NAME_ENTRY_ROW_OFF + 4 <= NAME_ENTRY_LEN_OFF, "NAME_ENTRY.row");
_Static_assert(NAME_ENTRY_LEN_OFF + 4 <= NAME_ENTRY_NAME_OFF, "NAME_ENTRY.len");
_Static_assert(NAME_ENTRY_NAME_OFF + 48 <= NAME_ENTRY_BYTES, "NAME_ENTRY.name");
_Static_assert(CHUNK_NEXT_OFF + 4 <= CHUNK_OWNER_OFF, "CHUNK.next");
_Static_assert(CHUNK_OWNER_OFF + 4 <= CHUNK_ENTRIES_OFF, "CHUNK.owner");
_Static_assert(CHUNK_ENTRIES_OFF + 24 <= CHUNK_BYTES, "CHUNK.entries");
_Static_assert(LEASE_STATE_LEASE_OFF + 8 <= LEASE_STATE_GRANTED_OFF, "LEASE_STATE.lease");
_Static_assert(LEASE_STATE_GRANTED_OFF + 8 <= LEASE_STATE_SPENT_OFF, "LEASE_STATE.granted");
_Static_assert(LEASE_STATE_SPENT_OFF + 8 <= LEASE_STATE_DEADLINE_NS_OFF, "LEASE_STATE.spent");
_Static_assert(LEASE_STATE_DEADLINE_NS_OFF + 8 <= LEASE_STATE_START_NS_OFF, "LEASE_STATE.deadline_ns");
_Static_assert(LEASE_STATE_START_NS_OFF + 8 <= LEASE_STATE_GRANT_US_OFF, "LEASE_STATE.start_ns");
_Static_assert(LEASE_STATE_GRANT_US_OFF + 8 <= LEASE_STATE_LAST_NS_OFF, "LEASE_STATE.grant_us");
_Static_assert(LEASE_STATE_LAST_NS_OFF + 8 <= LEASE_STATE_DENY_NS_OFF, "LEASE_STATE.last_ns");
_Static_assert(LEASE_STATE_DENY_NS_OFF + 8 <= LEASE_STATE_SERVED_OFF, "LEASE_STATE.deny_ns");
_Static_assert(LEASE_STATE_SERVED_OFF + 8 <= LEASE_STATE_LEASES_OFF, "LEASE_STATE.served");
_Static_assert(LEASE_STATE_LEASES_OFF + 8 <= LEASE_STATE_REFUSALS_OFF, "LEASE_STATE.leases");
_Static_assert(LEASE_STATE_REFUSALS_OFF + 8 <= LEASE_STATE_BYTES, "LEASE_STATE.refusals");
_Static_assert(DIST_SLOT_EPOCH_OFF + 8 <= DIST_SLOT_COUNT_OFF, "DIST_SLOT.epoch");
_Static_assert(DIST_SLOT_COUNT_OFF + 8 <= DIST_SLOT_SUM_OFF, "DIST_SLOT.count");
_Static_assert(DIST_SLOT_SUM_OFF + 8 <= DIST_SLOT_MIN_OFF, "DIST_SLOT.sum");
_Static_assert(DIST_SLOT_MIN_OFF + 8 <= DIST_SLOT_MAX_OFF, "DIST_SLOT.min");
_Static_assert(DIST_SLOT_MAX_OFF + 8 <= DIST_SLOT_BYTES, "DIST_SLOT.max");
_Static_assert(CACHE_STATE_EXPIRES_NS_OFF + 8 <= CACHE_STATE_VALUE_OFF, "CACHE_STATE.expires_ns");
_Static_assert(CACHE_STATE_VALUE_OFF + 8 <= CACHE_STATE_BYTES, "CACHE_STATE.value");
_Static_assert(SERIES_HDR_MAGIC_OFF + 8 <= SERIES_HDR_VERSION_OFF, "SERIES_HDR.magic");
_Static_assert(SERIES_HDR_VERSION_OFF + 4 <= SERIES_HDR_HEADER_BYTES_OFF, "SERIES_HDR.version");
_Static_assert(SERIES_HDR_HEADER_BYTES_OFF + 4 <= SERIES_HDR_TOTAL_BYTES_OFF, "SERIES_HDR.header_bytes");
_Static_assert(SERIES_HDR_TOTAL_BYTES_OFF + 8 <= SERIES_HDR_HASH_KEY_OFF, "SERIES_HDR.total_bytes");
_Static_assert(SERIES_HDR_HASH_KEY_OFF + 16 <= SERIES_HDR_ROLE_OFF, "SERIES_HDR.hash_key");
_Static_assert(SERIES_HDR_ROLE_OFF + 4 <= SERIES_HDR_MAX_SERIES_OFF, "SERIES_HDR.role");
_Static_assert(SERIES_HDR_MAX_SERIES_OFF + 8 <= SERIES_HDR_INDEX_SLOTS_OFF, "SERIES_HDR.max_series");
_Static_assert(SERIES_HDR_INDEX_SLOTS_OFF + 8 <= SERIES_HDR_N_SLOTS_OFF, "SERIES_HDR.index_slots");
_Static_assert(SERIES_HDR_N_SLOTS_OFF + 8 <= SERIES_HDR_LOCKS_AT_OFF, "SERIES_HDR.n_slots");
_Static_assert(SERIES_HDR_LOCKS_AT_OFF + 8 <= SERIES_HDR_SLOTS_AT_OFF, "SERIES_HDR.locks_at");
_Static_assert(SERIES_HDR_SLOTS_AT_OFF + 8 <= SERIES_HDR_INDEX_AT_OFF, "SERIES_HDR.slots_at");
_Static_assert(SERIES_HDR_INDEX_AT_OFF + 8 <= SERIES_HDR_ENTRIES_AT_OFF, "SERIES_HDR.index_at");
_Static_assert(SERIES_HDR_ENTRIES_AT_OFF + 8 <= SERIES_HDR_ENTRIES_BYTES_OFF, "SERIES_HDR.entries_at");
_Static_assert(SERIES_HDR_ENTRIES_BYTES_OFF + 8 <= SERIES_HDR_CELLS_AT_OFF, "SERIES_HDR.entries_bytes");
_Static_assert(SERIES_HDR_CELLS_AT_OFF + 8 <= SERIES_HDR_ENTRY_TOP_OFF, "SERIES_HDR.cells_at");
_Static_assert(SERIES_HDR_ENTRY_TOP_OFF + 8 <= SERIES_HDR_CELLS_TOP_OFF, "SERIES_HDR.entry_top");
_Static_assert(SERIES_HDR_CELLS_TOP_OFF + 8 <= SERIES_HDR_LIFETIMES_OFF, "SERIES_HDR.cells_top");
_Static_assert(SERIES_HDR_LIFETIMES_OFF + 8 <= SERIES_HDR_FULL_COUNT_OFF, "SERIES_HDR.lifetimes");
_Static_assert(SERIES_HDR_FULL_COUNT_OFF + 8 <= SERIES_HDR_ENTRIES_OFF, "SERIES_HDR.full_count");
_Static_assert(SERIES_HDR_ENTRIES_OFF + 8 <= SERIES_HDR_INDEX_LEVEL_OFF, "SERIES_HDR.entries");
_Static_assert(SERIES_HDR_INDEX_LEVEL_OFF + 8 <= SERIES_HDR_BYTES, "SERIES_HDR.index_level");
_Static_assert(SERIES_ENTRY_KEY_LEN_OFF + 4 <= SERIES_ENTRY_KIND_OFF, "SERIES_ENTRY.key_len");
_Static_assert(SERIES_ENTRY_KIND_OFF + 4 <= SERIES_ENTRY_HASH_OFF, "SERIES_ENTRY.kind");
_Static_assert(SERIES_ENTRY_HASH_OFF + 8 <= SERIES_ENTRY_CELL_OFF, "SERIES_ENTRY.hash");
_Static_assert(SERIES_ENTRY_CELL_OFF + 8 <= SERIES_ENTRY_SLOT_OFF, "SERIES_ENTRY.cell");
_Static_assert(SERIES_ENTRY_SLOT_OFF + 8 <= SERIES_ENTRY_LIFETIME_OFF, "SERIES_ENTRY.slot");
_Static_assert(SERIES_ENTRY_LIFETIME_OFF + 8 <= SERIES_ENTRY_PID_OFF, "SERIES_ENTRY.lifetime");
_Static_assert(SERIES_ENTRY_PID_OFF + 8 <= SERIES_ENTRY_FLAGS_OFF, "SERIES_ENTRY.pid");
_Static_assert(SERIES_ENTRY_FLAGS_OFF + 8 <= SERIES_ENTRY_BYTES, "SERIES_ENTRY.flags");
_Static_assert(SERIES_CELL_VALUE_OFF + 8 <= SERIES_CELL_STAMP_OFF, "SERIES_CELL.value");
_Static_assert(SERIES_CELL_STAMP_OFF + 8 <= SERIES_CELL_SEQ_OFF, "SERIES_CELL.stamp");
_Static_assert(SERIES_CELL_SEQ_OFF + 8 <= SERIES_CELL_ENTRY_OFF, "SERIES_CELL.seq");
_Static_assert(SERIES_CELL_ENTRY_OFF + 8 <= SERIES_CELL_BYTES, "SERIES_CELL.entry");
_Static_assert(KEY_ROW_KEY_OFF + MAX_STORED_KEY == KEY_HEADER_BYTES, "a key row's key bytes");
_Static_assert(KEY_LONG_PREFIX + KEY_DIGEST_BYTES == MAX_STORED_KEY, "a long key");
_Static_assert(sizeof(ShmwinHeader) <= HEADER_BYTES, "the header page");

#endif /* SHMWIN_LAYOUT_H */
