# ruff: noqa: E501
"""Nsight Systems SQLite export: the tables and columns the adapter reads, and reference DDL.

``EXPORT_DDL_2026`` holds CREATE TABLE statements exactly as written by nsys 2026.2.1 (export schema
3.25.0; ``TARGET_INFO_GPU``/``TARGET_INFO_CUDA_DEVICE`` from 2026.1.1), read from the public exports'
``sqlite_master`` (runs of blanks collapsed).  Test fixtures and the benchmark generator build their
files from it, so they use the real schema.  Older exports lack some columns (``greenContextId``,
``graphId``, ``tensorSizeMinusOneElements``, ...): the adapter requires only the columns in
``REQUIRED_COLUMNS`` and keeps every column it does not map in ``args_json``.
"""

from __future__ import annotations

EXPORT_DDL_2026: dict[str, str] = {
    'StringIds': (
        'CREATE TABLE StringIds (\n'
        '    -- Consolidation of repetitive string values.\n'
        '\n'
        '    id INTEGER NOT NULL PRIMARY KEY, -- ID reference value.\n'
        '    value TEXT NOT NULL -- String value.\n'
        ')\n'
        '\n'
    ),
    'ThreadNames': (
        'CREATE TABLE ThreadNames (\n'
        '    nameId INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Thread name\n'
        '    priority INTEGER, -- Priority of the thread.\n'
        '    globalTid INTEGER -- Serialized GlobalId.\n'
        ')\n'
        '\n'
    ),
    'PROCESSES': (
        'CREATE TABLE PROCESSES (\n'
        '    -- Names and identifiers of processes captured in the report.\n'
        '\n'
        '    globalPid INTEGER, -- Serialized GlobalId.\n'
        '    pid INTEGER, -- The process ID.\n'
        '    name TEXT -- The process name.\n'
        ')\n'
        '\n'
    ),
    'TARGET_INFO_SESSION_START_TIME': (
        'CREATE TABLE TARGET_INFO_SESSION_START_TIME (\n'
        '    utcEpochNs INTEGER, -- UTC Epoch timestamp at start of the capture (ns).\n'
        '    utcTime TEXT, -- Start of the capture in UTC.\n'
        '    localTime TEXT, -- Start of the capture in local time of target.\n'
        '    systemClockNs INTEGER -- Target system clock timestamp at start of the capture (ns).\n'
        ')\n'
        '\n'
    ),
    'META_DATA_EXPORT': (
        'CREATE TABLE META_DATA_EXPORT (\n'
        '    -- information about nsys export process\n'
        '\n'
        '    name TEXT NOT NULL, -- Name of meta-data record\n'
        '    value TEXT -- Value of meta-data record\n'
        ')\n'
        '\n'
    ),
    'META_DATA_CAPTURE': (
        'CREATE TABLE META_DATA_CAPTURE (\n'
        '    -- information about nsys capture parameters\n'
        '\n'
        '    name TEXT NOT NULL, -- Name of meta-data record\n'
        '    value TEXT -- Value of meta-data record\n'
        ')\n'
        '\n'
    ),
    'ENUM_NSYS_EVENT_CLASS': (
        'CREATE TABLE ENUM_NSYS_EVENT_CLASS (\n'
        '    -- Nsys event class labels\n'
        '\n'
        '    id INTEGER NOT NULL PRIMARY KEY, -- Enum numerical value.\n'
        '    name TEXT, -- Enum symbol name.\n'
        '    label TEXT -- Enum human name.\n'
        ')\n'
        '\n'
    ),
    'ENUM_CUDA_MEMCPY_OPER': (
        'CREATE TABLE ENUM_CUDA_MEMCPY_OPER (\n'
        '    -- CUDA memcpy operation labels\n'
        '\n'
        '    id INTEGER NOT NULL PRIMARY KEY, -- Enum numerical value.\n'
        '    name TEXT, -- Enum symbol name.\n'
        '    label TEXT -- Enum human name.\n'
        ')\n'
        '\n'
    ),
    'ENUM_CUPTI_SYNC_TYPE': (
        'CREATE TABLE ENUM_CUPTI_SYNC_TYPE (\n'
        '    -- CUPTI synchronization type labels\n'
        '\n'
        '    id INTEGER NOT NULL PRIMARY KEY, -- Enum numerical value.\n'
        '    name TEXT, -- Enum symbol name.\n'
        '    label TEXT -- Enum human name.\n'
        ')\n'
        '\n'
    ),
    'CUPTI_ACTIVITY_KIND_RUNTIME': (
        'CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (\n'
        '    start INTEGER NOT NULL, -- Event start timestamp (ns).\n'
        '    end INTEGER NOT NULL, -- Event end timestamp (ns).\n'
        '    eventClass INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)\n'
        '    globalTid INTEGER, -- Serialized GlobalId.\n'
        '    correlationId INTEGER, -- ID used to identify events that this function call has triggered.\n'
        '    nameId INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Function name\n'
        '    returnValue INTEGER NOT NULL, -- Return value of the function call.\n'
        '    callchainId INTEGER -- REFERENCES CUDA_CALLCHAINS(id)\n'
        ')\n'
        '\n'
    ),
    'CUPTI_ACTIVITY_KIND_KERNEL': (
        'CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (\n'
        '    start INTEGER NOT NULL, -- Event start timestamp (ns).\n'
        '    end INTEGER NOT NULL, -- Event end timestamp (ns).\n'
        '    deviceId INTEGER NOT NULL, -- Device ID.\n'
        '    contextId INTEGER NOT NULL, -- Context ID.\n'
        '    greenContextId INTEGER, -- Green context ID.\n'
        '    streamId INTEGER NOT NULL, -- Stream ID.\n'
        '    correlationId INTEGER, -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)\n'
        '    globalPid INTEGER, -- Serialized GlobalId.\n'
        '    demangledName INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Kernel function name w/ templates\n'
        '    shortName INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Base kernel function name\n'
        '    mangledName INTEGER, -- REFERENCES StringIds(id) -- Raw C++ mangled kernel function name\n'
        '    launchType INTEGER, -- REFERENCES ENUM_CUDA_KERNEL_LAUNCH_TYPE(id)\n'
        '    cacheConfig INTEGER, -- REFERENCES ENUM_CUDA_FUNC_CACHE_CONFIG(id)\n'
        '    registersPerThread INTEGER NOT NULL, -- Number of registers required for each thread executing the kernel.\n'
        '    gridX INTEGER NOT NULL, -- X-dimension grid size.\n'
        '    gridY INTEGER NOT NULL, -- Y-dimension grid size.\n'
        '    gridZ INTEGER NOT NULL, -- Z-dimension grid size.\n'
        '    blockX INTEGER NOT NULL, -- X-dimension block size.\n'
        '    blockY INTEGER NOT NULL, -- Y-dimension block size.\n'
        '    blockZ INTEGER NOT NULL, -- Z-dimension block size.\n'
        '    staticSharedMemory INTEGER NOT NULL, -- Static shared memory allocated for the kernel (B).\n'
        '    dynamicSharedMemory INTEGER NOT NULL, -- Dynamic shared memory reserved for the kernel (B).\n'
        '    localMemoryPerThread INTEGER NOT NULL, -- Amount of local memory reserved for each thread (B).\n'
        '    localMemoryTotal INTEGER NOT NULL, -- Total amount of local memory reserved for the kernel (B).\n'
        '    gridId INTEGER NOT NULL, -- Unique grid ID of the kernel assigned at runtime.\n'
        '    sharedMemoryExecuted INTEGER, -- Shared memory size set by the driver.\n'
        '    graphNodeId INTEGER, -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)\n'
        '    sharedMemoryLimitConfig INTEGER, -- REFERENCES ENUM_CUDA_SHARED_MEM_LIMIT_CONFIG(id)\n'
        '    qmdBulkReleaseDone INTEGER, -- QMD bulk release done timestamp from CWD events.\n'
        '    qmdPreexitDone INTEGER, -- QMD pre-exit done timestamp from CWD events.\n'
        '    qmdLastCtaDone INTEGER, -- QMD last CTA done timestamp from CWD events.\n'
        '    graphId INTEGER, -- Kernel graph ID.\n'
        '    clusterX INTEGER, -- Cluster X dimension.\n'
        '    clusterY INTEGER, -- Cluster Y dimension.\n'
        '    clusterZ INTEGER, -- Cluster Z dimension.\n'
        '    clusterSchedulingPolicy INTEGER, -- Cluster scheduling policy.\n'
        '    maxPotentialClusterSize INTEGER, -- Maximum potential cluster size.\n'
        '    maxActiveClusters INTEGER, -- Maximum active clusters.\n'
        '    sharedMemoryRequestedPercentage INTEGER, -- Shared memory requested percentage.\n'
        '    tensorSizeMinusOneElements TEXT NOT NULL -- TMA descriptor tensor size minus one elements array.\n'
        ')\n'
        '\n'
    ),
    'CUPTI_ACTIVITY_KIND_MEMCPY': (
        'CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (\n'
        '    start INTEGER NOT NULL, -- Event start timestamp (ns).\n'
        '    end INTEGER NOT NULL, -- Event end timestamp (ns).\n'
        '    deviceId INTEGER NOT NULL, -- Device ID.\n'
        '    contextId INTEGER NOT NULL, -- Context ID.\n'
        '    greenContextId INTEGER, -- Green context ID.\n'
        '    streamId INTEGER NOT NULL, -- Stream ID.\n'
        '    correlationId INTEGER, -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)\n'
        '    globalPid INTEGER, -- Serialized GlobalId.\n'
        '    bytes INTEGER NOT NULL, -- Number of bytes transferred (B).\n'
        '    copyKind INTEGER NOT NULL, -- REFERENCES ENUM_CUDA_MEMCPY_OPER(id)\n'
        '    deprecatedSrcId INTEGER, -- Deprecated, use srcDeviceId instead.\n'
        '    srcKind INTEGER, -- REFERENCES ENUM_CUDA_MEM_KIND(id)\n'
        '    dstKind INTEGER, -- REFERENCES ENUM_CUDA_MEM_KIND(id)\n'
        '    srcDeviceId INTEGER, -- Source device ID.\n'
        '    srcContextId INTEGER, -- Source context ID.\n'
        '    dstDeviceId INTEGER, -- Destination device ID.\n'
        '    dstContextId INTEGER, -- Destination context ID.\n'
        '    migrationCause INTEGER, -- REFERENCES ENUM_CUDA_UNIF_MEM_MIGRATION(id)\n'
        '    graphNodeId INTEGER, -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)\n'
        '    virtualAddress INTEGER, -- Virtual base address of the page/s being transferred.\n'
        '    copyCount INTEGER -- The total number of memcopy operations traced in this record. In CUDA MemcpyBatchAsync APIs, multiple memcpy operations may be batched together for optimization purposes based on certain heuristics.\n'
        ')\n'
        '\n'
    ),
    'CUPTI_ACTIVITY_KIND_MEMSET': (
        'CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (\n'
        '    start INTEGER NOT NULL, -- Event start timestamp (ns).\n'
        '    end INTEGER NOT NULL, -- Event end timestamp (ns).\n'
        '    deviceId INTEGER NOT NULL, -- Device ID.\n'
        '    contextId INTEGER NOT NULL, -- Context ID.\n'
        '    greenContextId INTEGER, -- Green context ID.\n'
        '    streamId INTEGER NOT NULL, -- Stream ID.\n'
        '    correlationId INTEGER, -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)\n'
        '    globalPid INTEGER, -- Serialized GlobalId.\n'
        '    value INTEGER NOT NULL, -- Value assigned to memory.\n'
        '    bytes INTEGER NOT NULL, -- Number of bytes set (B).\n'
        '    graphNodeId INTEGER, -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)\n'
        '    memKind INTEGER -- REFERENCES ENUM_CUDA_MEM_KIND(id)\n'
        ')\n'
        '\n'
    ),
    'CUPTI_ACTIVITY_KIND_SYNCHRONIZATION': (
        'CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (\n'
        '    start INTEGER NOT NULL, -- Event start timestamp (ns).\n'
        '    end INTEGER NOT NULL, -- Event end timestamp (ns).\n'
        '    deviceId INTEGER NOT NULL, -- Device ID.\n'
        '    contextId INTEGER NOT NULL, -- Context ID.\n'
        '    greenContextId INTEGER, -- Green context ID.\n'
        '    streamId INTEGER NOT NULL, -- Stream ID.\n'
        '    correlationId INTEGER, -- Correlation ID of the synchronization API to which this result is associated.\n'
        '    globalPid INTEGER, -- Serialized GlobalId.\n'
        '    deprecatedSyncType INTEGER, -- Deprecated, use syncType instead. For older report, REFERENCES ENUM_CUPTI_SYNC_TYPE(id)\n'
        '    syncType INTEGER NOT NULL, -- REFERENCES ENUM_CUPTI_SYNC_TYPE(id)\n'
        '    eventId INTEGER NOT NULL, -- Event ID for which the synchronization API is called.\n'
        '    eventSyncId INTEGER -- CUDA Event Sync ID to link the synchronization API to associated event record API.\n'
        ')\n'
        '\n'
    ),
    'NVTX_EVENTS': (
        'CREATE TABLE NVTX_EVENTS (\n'
        '    start INTEGER NOT NULL, -- Event start timestamp (ns).\n'
        '    end INTEGER, -- Event end timestamp (ns).\n'
        '    eventType INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_TYPE(id)\n'
        '    rangeId INTEGER, -- Correlation ID returned from a nvtxRangeStart call.\n'
        '    category INTEGER, -- User-controlled ID that can be used to group events.\n'
        '    color INTEGER, -- Encoded ARGB color value.\n'
        '    text TEXT, -- Explicit name/text (non-registered string)\n'
        '    globalTid INTEGER, -- Serialized GlobalId.\n'
        '    endGlobalTid INTEGER, -- Serialized GlobalId.\n'
        '    textId INTEGER, -- REFERENCES StringIds(id) -- Registered NVTX domain/string\n'
        '    domainId INTEGER, -- User-controlled ID that can be used to group events.\n'
        '    uint64Value INTEGER, -- One of possible payload value union members.\n'
        '    int64Value INTEGER, -- One of possible payload value union members.\n'
        '    doubleValue REAL, -- One of possible payload value union members.\n'
        '    uint32Value INTEGER, -- One of possible payload value union members.\n'
        '    int32Value INTEGER, -- One of possible payload value union members.\n'
        '    floatValue REAL, -- One of possible payload value union members.\n'
        '    jsonTextId INTEGER, -- One of possible payload value union members.\n'
        '    jsonText TEXT, -- One of possible payload value union members.\n'
        '    binaryData TEXT -- Binary payload. See docs for format.\n'
        ')\n'
        '\n'
    ),
    'TARGET_INFO_GPU': (
        'CREATE TABLE TARGET_INFO_GPU (\n'
        '    vmId INTEGER NOT NULL, -- Serialized GlobalId.\n'
        '    id INTEGER NOT NULL, -- Device ID.\n'
        '    name TEXT, -- Device name.\n'
        '    busLocation TEXT, -- PCI bus location.\n'
        '    isDiscrete INTEGER, -- True if discrete, false if integrated.\n'
        '    l2CacheSize INTEGER, -- Size of L2 cache (B).\n'
        '    totalMemory INTEGER, -- Total amount of memory on the device (B).\n'
        '    memoryBandwidth INTEGER, -- Amount of memory transferred (B).\n'
        '    clockRate INTEGER, -- Clock frequency (Hz).\n'
        '    smCount INTEGER, -- Number of multiprocessors on the device.\n'
        '    pwGpuId INTEGER, -- PerfWorks GPU ID.\n'
        '    uuid TEXT, -- Device UUID.\n'
        '    luid INTEGER, -- Device LUID.\n'
        '    chipName TEXT, -- Chip name.\n'
        '    cuDevice INTEGER, -- CUDA device ID.\n'
        '    ctxswDevPath TEXT, -- GPU context switch device node path.\n'
        '    ctrlDevPath TEXT, -- GPU control device node path.\n'
        '    revision INTEGER, -- Revision number.\n'
        '    nodeMask INTEGER, -- Device node mask.\n'
        '    constantMemory INTEGER, -- Memory available on device for __constant__ variables (B).\n'
        '    maxIPC INTEGER, -- Maximum instructions per count.\n'
        '    maxRegistersPerBlock INTEGER, -- Maximum number of 32-bit registers available per block.\n'
        '    maxShmemPerBlock INTEGER, -- Maximum optin shared memory per block.\n'
        '    maxShmemPerBlockOptin INTEGER, -- Maximum optin shared memory per block.\n'
        '    maxShmemPerSm INTEGER, -- Maximum shared memory available per multiprocessor (B).\n'
        '    maxRegistersPerSm INTEGER, -- Maximum number of 32-bit registers available per multiprocessor.\n'
        '    threadsPerWarp INTEGER, -- Warp size in threads.\n'
        '    asyncEngines INTEGER, -- Number of asynchronous engines.\n'
        '    maxWarpsPerSm INTEGER, -- Maximum number of warps per multiprocessor.\n'
        '    maxBlocksPerSm INTEGER, -- Maximum number of blocks per multiprocessor.\n'
        '    maxThreadsPerBlock INTEGER, -- Maximum number of threads per block.\n'
        '    maxBlockDimX INTEGER, -- Maximum X-dimension of a block.\n'
        '    maxBlockDimY INTEGER, -- Maximum Y-dimension of a block.\n'
        '    maxBlockDimZ INTEGER, -- Maximum Z-dimension of a block.\n'
        '    maxGridDimX INTEGER, -- Maximum X-dimension of a grid.\n'
        '    maxGridDimY INTEGER, -- Maximum Y-dimension of a grid.\n'
        '    maxGridDimZ INTEGER, -- Maximum Z-dimension of a grid.\n'
        '    computeMajor INTEGER, -- Major compute capability version number.\n'
        '    computeMinor INTEGER, -- Minor compute capability version number.\n'
        '    smMajor INTEGER, -- Major multiprocessor version number.\n'
        '    smMinor INTEGER -- Minor multiprocessor version number.\n'
        ')\n'
        '\n'
    ),
    'TARGET_INFO_CUDA_DEVICE': (
        'CREATE TABLE TARGET_INFO_CUDA_DEVICE (\n'
        '    gpuId INTEGER, -- GPU ID.\n'
        '    cudaId INTEGER NOT NULL, -- CUDA device ID.\n'
        '    pid INTEGER NOT NULL, -- Process ID.\n'
        '    uuid TEXT, -- Device UUID.\n'
        '    numMultiprocessors INTEGER -- Number of SMs available on the device.\n'
        ')\n'
        '\n'
    ),
}

# Not present in any public export we hold: copied from the Nsight Systems SQLite schema reference
# (docs.nvidia.com/nsight-systems, "SQLite Export Schema Reference", 2024/2025 releases).
EXPORT_DDL_DOCS: dict[str, str] = {
    "CUBLAS_EVENTS": (
        "CREATE TABLE CUBLAS_EVENTS (\n"
        "    start INTEGER NOT NULL, -- Event start timestamp (ns).\n"
        "    end INTEGER NOT NULL, -- Event end timestamp (ns).\n"
        "    eventClass INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)\n"
        "    globalTid INTEGER, -- Serialized GlobalId.\n"
        "    nameId INTEGER NOT NULL -- REFERENCES StringIds(id) -- Function name\n"
        ")\n"
    ),
    "CUDNN_EVENTS": (
        "CREATE TABLE CUDNN_EVENTS (\n"
        "    start INTEGER NOT NULL, -- Event start timestamp (ns).\n"
        "    end INTEGER NOT NULL, -- Event end timestamp (ns).\n"
        "    eventClass INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)\n"
        "    globalTid INTEGER, -- Serialized GlobalId.\n"
        "    nameId INTEGER NOT NULL -- REFERENCES StringIds(id) -- Function name\n"
        ")\n"
    ),
    "CUDA_GRAPH_NODE_EVENTS": (
        "CREATE TABLE CUDA_GRAPH_NODE_EVENTS (\n"
        "    start INTEGER NOT NULL, -- Event start timestamp (ns).\n"
        "    end INTEGER NOT NULL, -- Event end timestamp (ns).\n"
        "    eventClass INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)\n"
        "    globalTid INTEGER, -- Serialized GlobalId.\n"
        "    nameId INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Function name\n"
        "    graphNodeId INTEGER NOT NULL, -- REFERENCES CUDA_GRAPH_NODE_EVENTS(graphNodeId)\n"
        "    originalGraphNodeId INTEGER -- Reference to the original graph node ID, if cloned node.\n"
        ")\n"
    ),
    "CUDA_GRAPH_EVENTS": (
        "CREATE TABLE CUDA_GRAPH_EVENTS (\n"
        "    start INTEGER NOT NULL, -- Event start timestamp (ns).\n"
        "    end INTEGER NOT NULL, -- Event end timestamp (ns).\n"
        "    eventClass INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)\n"
        "    globalTid INTEGER, -- Serialized GlobalId.\n"
        "    nameId INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Function name\n"
        "    graphId INTEGER, -- Graph ID.\n"
        "    originalGraphId INTEGER, -- Reference to the original graph ID, if cloned.\n"
        "    graphExecId INTEGER -- Executable graph ID.\n"
        ")\n"
    ),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (\n"
        "    start INTEGER NOT NULL, -- Event start timestamp (ns).\n"
        "    end INTEGER NOT NULL, -- Event end timestamp (ns).\n"
        "    deviceId INTEGER NOT NULL, -- Device ID.\n"
        "    contextId INTEGER NOT NULL, -- Context ID.\n"
        "    greenContextId INTEGER, -- Green context ID.\n"
        "    streamId INTEGER NOT NULL, -- Stream ID.\n"
        "    correlationId INTEGER, -- REFERENCES CUPTI_ACTIVITY_KIND_RUNTIME(correlationId)\n"
        "    globalPid INTEGER, -- Serialized GlobalId.\n"
        "    graphId INTEGER NOT NULL, -- REFERENCES CUDA_GRAPH_EVENTS(graphId)\n"
        "    graphExecId INTEGER NOT NULL -- REFERENCES CUDA_GRAPH_EVENTS(graphExecId)\n"
        ")\n"
    ),
    "OSRT_API": (
        "CREATE TABLE OSRT_API (\n"
        "    start INTEGER NOT NULL, -- Event start timestamp (ns).\n"
        "    end INTEGER NOT NULL, -- Event end timestamp (ns).\n"
        "    eventClass INTEGER NOT NULL, -- REFERENCES ENUM_NSYS_EVENT_CLASS(id)\n"
        "    globalTid INTEGER, -- Serialized GlobalId.\n"
        "    nameId INTEGER NOT NULL, -- REFERENCES StringIds(id) -- Function name\n"
        "    returnValue INTEGER NOT NULL, -- Return value of the function call.\n"
        "    nestingLevel INTEGER, -- Zero-base index of the nesting level.\n"
        "    callchainId INTEGER -- REFERENCES OSRT_CALLCHAINS(id)\n"
        ")\n"
    ),
}

# globalTid = (pid << 24 | tid) plus hardware/VM ids in the top bits (Nsight docs: pid = globalTid / 0x1000000 %
# 0x1000000, tid = globalTid % 0x1000000); globalPid has the same layout with tid = 0.
GLOBAL_ID_SHIFT = 24
GLOBAL_ID_MASK = 0xFFFFFF

# ENUM_NSYS_EVENT_CLASS ids (identical in the 2025.1 and 2026.x exports).
EVENT_CLASS_CUDA_RUNTIME = 0
EVENT_CLASS_CUDA_DRIVER = 1

# ENUM_NSYS_EVENT_TYPE ids of NVTX rows.
NVTX_RANGE_TYPES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange, NvtxtPushPopRange, NvtxtStartEndRange
NVTX_MARK_TYPES = (34, 65)  # NvtxMark, NvtxtMark
NVTX_DOMAIN_CREATE = 75  # NvtxDomainCreate: text = domain name, domainId = its id

# ENUM_CUDA_MEMCPY_OPER: id -> (short kind, label); used when the export lacks the ENUM table.
MEMCPY_KINDS: dict[int, tuple[str, str]] = {
    0: ("Unknown", "Unknown"),
    1: ("HtoD", "Host-to-Device"),
    2: ("DtoH", "Device-to-Host"),
    3: ("HtoA", "Host-to-Array"),
    4: ("AtoH", "Array-to-Host"),
    5: ("AtoA", "Array-to-Array"),
    6: ("AtoD", "Array-to-Device"),
    7: ("DtoA", "Device-to-Array"),
    8: ("DtoD", "Device-to-Device"),
    9: ("HtoH", "Host-to-Host"),
    10: ("PtoP", "Peer-to-Peer"),
    11: ("UVM HtoD", "Unified Host-to-Device"),
    12: ("UVM DtoH", "Unified Device-to-Host"),
    13: ("UVM DtoD", "Unified Device-to-Device"),
}

# ENUM_CUPTI_SYNC_TYPE labels.
SYNC_TYPES: dict[int, str] = {
    0: "Unknown", 1: "Event sync", 2: "Stream wait sync", 3: "Stream sync", 4: "Context sync",
}

# Event tables the adapter reads, and the columns each must have (the rest are optional or go to args_json).
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "eventClass", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName",
        "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread", "staticSharedMemory",
        "dynamicSharedMemory",
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "syncType"),
    "NVTX_EVENTS": ("start", "end", "eventType", "text", "globalTid"),
    "CUBLAS_EVENTS": ("start", "end", "globalTid", "nameId"),
    "CUDNN_EVENTS": ("start", "end", "globalTid", "nameId"),
    "CUDA_GRAPH_EVENTS": ("start", "end", "globalTid", "nameId"),
    "CUDA_GRAPH_NODE_EVENTS": ("start", "end", "globalTid", "nameId", "graphNodeId"),
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("start", "end", "deviceId", "streamId", "correlationId", "globalPid", "graphId"),
    "OSRT_API": ("start", "end", "globalTid", "nameId"),
}
EVENT_TABLES: tuple[str, ...] = tuple(REQUIRED_COLUMNS)
OSRT_TABLE = "OSRT_API"
# Export metadata (name/value records): newer exports write META_DATA_EXPORT, older ones (such as the 2022.1 export
# NVIDIA DLProf writes) EXPORT_META_DATA; nsys 2022.4 writes neither. Both are read; when a file has both, a record
# of META_DATA_EXPORT wins.
EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
# Version records in them (tool_versions key <- record names, first present wins).
EXPORT_VERSION_KEYS: dict[str, tuple[str, ...]] = {
    "nsys_export": ("EXPORT_PRODUCT_VERSION", "PRODUCT_VERSION", "NSYS_VERSION"),
    "export_schema": ("EXPORT_SCHEMA_VERSION", "SCHEMA_VERSION"),
}
# Tables whose presence marks a file as an Nsight export.
NSYS_MARKER_TABLES = ("StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", *EXPORT_META_TABLES)
